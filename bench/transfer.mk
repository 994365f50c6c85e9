# bench/transfer — KV transfer bandwidth vs ucx_perftest (ucp_put_bw) in the same run
# (DESIGN §10h: bench/results/transfer.json). `make bench-transfer`.
noinst_PROGRAMS += bench/transfer
bench_transfer_SOURCES = bench/transfer.c
bench_transfer_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir) $(UCX_CFLAGS)
bench_transfer_LDADD = $(XFER_LIBS)
EXTRA_DIST += bench/transfer.sh

bench-transfer: bench/transfer
	$(SHELL) $(top_srcdir)/bench/transfer.sh '$(abs_top_builddir)' '$(abs_top_srcdir)'
.PHONY: bench-transfer
