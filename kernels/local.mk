# kernels/ — the backend table (kernels/backend.h) and its CPU implementation (kernels/cpu/).
# Kernels build with -ffp-contract=off and never -ffast-math: the determinism contract of
# backend.h requires every mul and add to round on its own, identically in the generic C table
# (generic.c) and the AVX2 table (avx2.c, target("avx2") without "fma", picked at init by cpuid).
# bench/kernels.mk (the kernel microbenchmark) is included from here.
TDM_KERNEL_CFLAGS = -O2 -ffp-contract=off -fno-fast-math
noinst_LIBRARIES += libtdmkernels.a
libtdmkernels_a_SOURCES = \
	kernels/cpu/cpu.c \
	kernels/cpu/generic.c \
	kernels/cpu/avx2.c \
	kernels/cpu/matmul.c \
	kernels/cpu/attn.c \
	kernels/cpu/reduce.c \
	kernels/cpu/threadpool.c
libtdmkernels_a_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)
libtdmkernels_a_CFLAGS = $(AM_CFLAGS) $(TDM_KERNEL_CFLAGS)
noinst_HEADERS += kernels/backend.h kernels/cpu/cpu_int.h

KERNEL_TESTS = tests/unit/test-kernels
check_PROGRAMS += $(KERNEL_TESTS)
TESTS += $(KERNEL_TESTS)
tests_unit_test_kernels_SOURCES = tests/unit/test-kernels.c
tests_unit_test_kernels_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir)
tests_unit_test_kernels_CFLAGS = $(AM_CFLAGS) $(TDM_KERNEL_CFLAGS)
tests_unit_test_kernels_LDADD = libtdmkernels.a libtdmkv.a $(COMMON_LIBS)
include kernels/cuda.mk
include bench/kernels.mk
