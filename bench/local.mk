# bench/ — benchmarks (not tests): `make bench` runs them on this machine and writes
# bench/results/*.json, each number beside its anchor measured in the same run (docs/contracts.md §h).
noinst_PROGRAMS += bench/cpu_engine
bench_cpu_engine_SOURCES = bench/cpu_engine.c
bench_cpu_engine_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)
bench_cpu_engine_LDADD = $(WORKER_ENGINE_LIBS) $(COMMON_LIBS)
EXTRA_DIST += bench/cpu_engine.sh bench/gen_random_model.py
noinst_HEADERS += bench/bench_stat.h

bench: bench/cpu_engine
	$(SHELL) $(top_srcdir)/bench/cpu_engine.sh '$(abs_top_builddir)' '$(abs_top_srcdir)'
.PHONY: bench
include bench/controlplane.mk
include bench/serving.mk
