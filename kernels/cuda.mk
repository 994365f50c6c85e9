# kernels/cuda.mk — CUDA kernels (nvcc, sm_90a, via the .cu.o rule of Makefile.am) and their GPU
# tests. The objects build wherever nvcc exists; the tests skip without a device.
EXTRA_DIST += kernels/cuda/smoke.cu
noinst_HEADERS += kernels/cuda/smoke.h
if HAVE_CUDA
GPU_TESTS = tests/gpu/test-cuda-smoke
check_PROGRAMS += $(GPU_TESTS)
TESTS += $(GPU_TESTS)
tests_gpu_test_cuda_smoke_SOURCES = tests/gpu/test-cuda-smoke.c kernels/cuda/smoke.cu
tests_gpu_test_cuda_smoke_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir) $(CUDA_CFLAGS)
tests_gpu_test_cuda_smoke_LDFLAGS = $(AM_LDFLAGS) -Wl,--as-needed
tests_gpu_test_cuda_smoke_LDADD = $(COMMON_LIBS) $(CUDA_LIBS) -lstdc++
endif
