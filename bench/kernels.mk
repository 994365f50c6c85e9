# bench/kernels.mk — CPU kernel microbenchmark (matmul GB/s and GFLOP/s, attention) beside
# memcpy/read bandwidth from the same run. `make bench-kernels` prints its JSON; build without
# sanitizers for numbers worth keeping.
noinst_PROGRAMS += bench/kernels
bench_kernels_SOURCES = bench/kernels.c
bench_kernels_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)
bench_kernels_LDADD = libtdmkernels.a libtdmkv.a $(COMMON_LIBS)

bench-kernels: bench/kernels
	./bench/kernels
.PHONY: bench-kernels
