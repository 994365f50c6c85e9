# kernels/cuda.mk — the CUDA backend (sm_90a): kernels (ops*.cu, shared device code in ops_int.cuh),
# the GPU forward (engine.cu, engine_load.cu, engine_fwd.cu; engine_int.h), the
# host-array entry points the tests use (ops_host.cu), the executor's adapter (exec_cuda.c: link
# libtdmcuda.a before libtdmgraph.a, plus $(CUDA_LIBS) -lstdc++), the smoke kernel, and their GPU
# tests. The objects build wherever nvcc exists (CI included); the tests skip without a device.
# The GPU decode benchmark (bench/gpu.mk) is included from here.
EXTRA_DIST += kernels/cuda/smoke.cu kernels/cuda/ops.cu kernels/cuda/ops_gemv.cu \
	kernels/cuda/ops_gemm.cu kernels/cuda/ops_attn.cu kernels/cuda/ops_attn_mma.cu kernels/cuda/engine.cu \
	kernels/cuda/engine_load.cu kernels/cuda/engine_fwd.cu kernels/cuda/engine_tp.cu kernels/cuda/ops_host.cu \
	kernels/cuda/hicache.cu kernels/cuda/device.cu kernels/cuda/sample.cu kernels/cuda/gemm_lt.cu tests/gpu/skip-no-cudart.sh tests/gpu/test-worker-cuda.sh
noinst_HEADERS += kernels/cuda/split_policy.h
# the decode attention's split count (host logic, kernels/cuda/split_policy.h): tested on every host
check_PROGRAMS += tests/unit/test-split-policy
TESTS += tests/unit/test-split-policy
tests_unit_test_split_policy_SOURCES = tests/unit/test-split-policy.c
tests_unit_test_split_policy_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir)
noinst_HEADERS += kernels/cuda/smoke.h kernels/cuda/cuda_int.h kernels/cuda/ops.h kernels/cuda/ops_int.cuh \
	kernels/cuda/engine.h kernels/cuda/engine_int.h kernels/cuda/exec_cuda.h kernels/cuda/module.h \
	kernels/cuda/hicache.h kernels/cuda/device.h kernels/cuda/sample.h kernels/cuda/gemm_lt.h
if HAVE_CUDA
noinst_LIBRARIES += libtdmcuda.a
libtdmcuda_a_SOURCES = kernels/cuda/ops.cu kernels/cuda/ops_gemv.cu kernels/cuda/ops_gemm.cu \
	kernels/cuda/ops_attn.cu kernels/cuda/ops_attn_mma.cu kernels/cuda/engine.cu \
	kernels/cuda/engine_load.cu kernels/cuda/engine_fwd.cu kernels/cuda/engine_tp.cu \
	kernels/cuda/ops_host.cu kernels/cuda/hicache.cu kernels/cuda/device.cu kernels/cuda/sample.cu \
	kernels/cuda/gemm_lt.cu kernels/cuda/exec_cuda.c kernels/cuda/module.c
endif
# GPU test binaries link cudart + cuBLAS; where nvcc exists without them, one TAP script says so.
if HAVE_CUDA_RT
CUDA_ENGINE_LIBS = libtdmcuda.a libtdmkernels.a libtdmkv.a libtdmmodel.a $(COMMON_LIBS) \
	$(CUDA_LIBS) -lstdc++

GPU_TESTS = tests/gpu/test-cuda-smoke tests/gpu/test-cuda-ops tests/gpu/test-cuda-forward \
	tests/gpu/test-cuda-exec tests/gpu/test-cuda-hicache tests/gpu/test-cuda-sample
check_PROGRAMS += $(GPU_TESTS)
TESTS += $(GPU_TESTS) tests/gpu/test-worker-cuda.sh
tests_gpu_test_cuda_smoke_SOURCES = tests/gpu/test-cuda-smoke.c kernels/cuda/smoke.cu
tests_gpu_test_cuda_smoke_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir) $(CUDA_CFLAGS)
tests_gpu_test_cuda_smoke_LDFLAGS = $(AM_LDFLAGS) -Wl,--as-needed
tests_gpu_test_cuda_smoke_LDADD = $(COMMON_LIBS) $(CUDA_LIBS) -lstdc++

tests_gpu_test_cuda_ops_SOURCES = tests/gpu/test-cuda-ops.c kernels/cuda/smoke.cu
tests_gpu_test_cuda_ops_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir) $(CUDA_CFLAGS)
tests_gpu_test_cuda_ops_LDADD = $(CUDA_ENGINE_LIBS)

tests_gpu_test_cuda_forward_SOURCES = tests/gpu/test-cuda-forward.c kernels/cuda/smoke.cu
tests_gpu_test_cuda_forward_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir) $(CUDA_CFLAGS)
tests_gpu_test_cuda_forward_LDADD = $(CUDA_ENGINE_LIBS)

tests_gpu_test_cuda_exec_SOURCES = tests/gpu/test-cuda-exec.c tests/gpu/gpu_fixture.h \
	kernels/cuda/smoke.cu
tests_gpu_test_cuda_exec_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir) $(CUDA_CFLAGS)
tests_gpu_test_cuda_exec_LDADD = libtdmcuda.a libtdmgraph.a $(CUDA_ENGINE_LIBS)

# the device sampler against the host sampler (kernels/cuda/sample.h)
tests_gpu_test_cuda_sample_SOURCES = tests/gpu/test-cuda-sample.c tests/gpu/gpu_fixture.h \
	kernels/cuda/smoke.cu
tests_gpu_test_cuda_sample_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir) $(CUDA_CFLAGS)
tests_gpu_test_cuda_sample_LDADD = libtdmcuda.a libtdmgraph.a libtdmsample.a $(CUDA_ENGINE_LIBS)

tests_gpu_test_cuda_hicache_SOURCES = tests/gpu/test-cuda-hicache.c kernels/cuda/smoke.cu
tests_gpu_test_cuda_hicache_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir) $(CUDA_CFLAGS)
tests_gpu_test_cuda_hicache_LDADD = libtdmcuda.a libtdmgraph.a $(CUDA_ENGINE_LIBS)
if HAVE_NCCL
# TP on one GPU: host-staged TP=2 vs TP=1 (§9 margin rule), the one-rank NCCL communicator bit for
# bit, the device marks of a stuck rank and their cost (dataplane/tp/gpu.h)
check_PROGRAMS += tests/gpu/test-cuda-tp
TESTS += tests/gpu/test-cuda-tp
tests_gpu_test_cuda_tp_SOURCES = tests/gpu/test-cuda-tp.c kernels/cuda/smoke.cu
tests_gpu_test_cuda_tp_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir) $(CUDA_CFLAGS)
tests_gpu_test_cuda_tp_LDADD = libtdmtpgpu.a libtdmtp.a $(CUDA_ENGINE_LIBS) $(NCCL_LIBS)
endif
else
TESTS += tests/gpu/skip-no-cudart.sh
endif
include bench/gpu.mk

# --enable-cuda-module: backend-cuda.so, installed in $(pkglibdir) (the tandem-cuda package): the
# engine, what it needs of the host libraries, and the CUDA runtime linked statically; every
# symbol local but the entry (module.map), so the module's copies never interpose the worker's.
EXTRA_DIST += kernels/cuda/module.map
if CUDA_MODULE
cudamoduledir = $(pkglibdir)
cudamodule_DATA = backend-cuda.so
CUDA_MODULE_IN = libtdmcuda.a libtdmkernels.a libtdmkv.a libtdmmodel.a libtdmcommon.a
backend-cuda.so: $(CUDA_MODULE_IN) $(srcdir)/kernels/cuda/module.map
	$(AM_V_CCLD)$(CC) -shared -o $@ $(AM_LDFLAGS) $(LDFLAGS) -Wl,--no-undefined \
	  -Wl,-u,tdm_cuda_module_v1 -Wl,--version-script=$(srcdir)/kernels/cuda/module.map \
	  $(CUDA_MODULE_IN) $(JANSSON_LIBS) $(XXHASH_LIBS) $(CUDA_MODULE_LIBS) -lstdc++ -lm
CLEANFILES += backend-cuda.so
endif

# The module loader (kernels/cuda/loader.c, in libtdmsched.a) against fake modules: absent, not
# a shared object, no entry symbol, another ABI, well-formed.
check_PROGRAMS += tests/unit/test-cuda-module
TESTS += tests/unit/test-cuda-module
tests_unit_test_cuda_module_SOURCES = tests/unit/test-cuda-module.c
tests_unit_test_cuda_module_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir)
tests_unit_test_cuda_module_LDADD = libtdmsched.a $(COMMON_LIBS)
CUDA_MODULE_FAKES = tests/unit/cuda-module-nosym.so tests/unit/cuda-module-abi.so \
	tests/unit/cuda-module-ok.so
check_SCRIPTS += $(CUDA_MODULE_FAKES)
CLEANFILES += $(CUDA_MODULE_FAKES)
EXTRA_DIST += tests/unit/cuda-module-fake.c
# the fakes fill the module table of module.h: rebuilt when it changes
CUDA_MODULE_FAKE_DEPS = $(srcdir)/kernels/cuda/module.h
TDM_FAKE_MODULE = $(AM_V_CC)$(MKDIR_P) tests/unit && $(CC) -std=gnu11 -shared -fPIC \
	-I$(top_srcdir)/include -I$(top_builddir) -I$(top_srcdir) -o $@ $(srcdir)/tests/unit/cuda-module-fake.c
tests/unit/cuda-module-nosym.so: $(srcdir)/tests/unit/cuda-module-fake.c $(CUDA_MODULE_FAKE_DEPS)
	$(TDM_FAKE_MODULE) -DFAKE_KIND=0
tests/unit/cuda-module-abi.so: $(srcdir)/tests/unit/cuda-module-fake.c $(CUDA_MODULE_FAKE_DEPS)
	$(TDM_FAKE_MODULE) -DFAKE_KIND=1
tests/unit/cuda-module-ok.so: $(srcdir)/tests/unit/cuda-module-fake.c $(CUDA_MODULE_FAKE_DEPS)
	$(TDM_FAKE_MODULE) -DFAKE_KIND=2
