# bench/controlplane.mk — tandemd ingest (4 loopback clients, end to end to committed rows) beside
# psql's \copy of the same rows in the same run, and open-loop REST reads at 1000 req/s with 1M
# sample rows stored and ingest running (docs/contracts.md §h: bench/results/controlplane.json).
# `make bench-controlplane`; build without sanitizers for numbers worth keeping.
noinst_PROGRAMS += bench/controlplane
bench_controlplane_SOURCES = bench/controlplane.c
bench_controlplane_CPPFLAGS = $(AM_CPPFLAGS) $(LIBPQ_CFLAGS)
bench_controlplane_LDADD = $(LIBPQ_LIBS) $(PTHREAD_LIBS)
EXTRA_DIST += bench/controlplane.sh

bench-controlplane: bench/controlplane tandemd tdm-pg
	$(SHELL) $(top_srcdir)/bench/controlplane.sh '$(abs_top_builddir)' '$(abs_top_srcdir)'
.PHONY: bench-controlplane
