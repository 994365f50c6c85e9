# bench/gpu.mk — the GPU decode benchmark (bench/gpu_decode.c: TinyLlama-1.1B shape, random bf16
# weights, through the CUDA engine, plus the CPU path's first 32 greedy tokens) and its anchors
# (bench/torch_anchor.py: transformers generate, a torch.compile decoder, device copy bandwidth),
# merged by bench/gpu-decode.sh into bench/results/gpu_decode.json. Runs on the device machine
# through tools/device-run.sh; see docs/cuda.md.
EXTRA_DIST += bench/gpu-decode.sh bench/torch_anchor.py bench/gpu-tp-detect.py bench/gpu-mixed-price.sh \
	bench/gpu-step-profile.sh bench/gpu_bench_lib.sh
if HAVE_CUDA_RT
noinst_PROGRAMS += bench/gpu_decode
bench_gpu_decode_SOURCES = bench/gpu_decode.c kernels/cuda/smoke.cu
bench_gpu_decode_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir) -I$(top_srcdir)/dataplane/model \
	$(CUDA_CFLAGS)
bench_gpu_decode_LDADD = libtdmcuda.a libtdmgraph.a $(CUDA_ENGINE_LIBS)

# HiCache on the GPU: TTFT of a 32k-token prefix served from the host tier against recomputing it
# (bench/gpu_hicache.c; $TDM_BENCH_OUT/hicache_gpu.json, merged into bench/results/hicache.json)
noinst_PROGRAMS += bench/gpu_hicache
bench_gpu_hicache_SOURCES = bench/gpu_hicache.c kernels/cuda/smoke.cu
bench_gpu_hicache_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir) $(CUDA_CFLAGS)
bench_gpu_hicache_LDADD = libtdmcuda.a libtdmgraph.a $(CUDA_ENGINE_LIBS)
noinst_HEADERS += bench/gpu_model.h
# The serving bench's ceiling (bench/gpu-serving.sh): the engine's batched decode on the served
# checkpoint at the concurrency sweep's batch sizes, ids-only and with logits copied back.
noinst_PROGRAMS += bench/gpu_serving_engine
bench_gpu_serving_engine_SOURCES = bench/gpu_serving_engine.c
bench_gpu_serving_engine_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir) $(CUDA_CFLAGS)
bench_gpu_serving_engine_LDADD = libtdmcuda.a libtdmgraph.a $(CUDA_ENGINE_LIBS)
endif

