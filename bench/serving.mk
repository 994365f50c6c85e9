# bench/serving.mk — `make bench-serving`: the serving runtime through POST /generate at
# concurrency 1, 8, 32, 64 in both loops, beside the engine's own batched decode at the same batch
# in the same run (bench/serving.sh → bench/results/serving.json). Use a build without sanitizers.
EXTRA_DIST += bench/serving.sh
bench-serving: tandem-worker bench/cpu_engine tests/integration/test-load
	$(SHELL) $(top_srcdir)/bench/serving.sh '$(abs_top_builddir)' '$(abs_top_srcdir)'
.PHONY: bench-serving

# `make bench-hicache`: HiCache on vs off in the same run, multi-turn chat on models/demo
# (bench/hicache.sh → bench/results/hicache.json).
EXTRA_DIST += bench/hicache.sh
bench-hicache: tandem-worker
	$(SHELL) $(top_srcdir)/bench/hicache.sh '$(abs_top_builddir)' '$(abs_top_srcdir)'
.PHONY: bench-hicache

# `make bench-pd-prefix`: PD's decode-side prefix on vs off (and with HiCache on decode) in the
# same run, multi-turn chat on models/demo (bench/pd-prefix.sh → bench/results/pd_prefix.json).
EXTRA_DIST += bench/pd-prefix.sh
bench-pd-prefix: tandem-worker
	$(SHELL) $(top_srcdir)/bench/pd-prefix.sh '$(abs_top_builddir)' '$(abs_top_srcdir)'
.PHONY: bench-pd-prefix

# `make bench-gpu-serving`: the OpenAI endpoint under open-loop load (bench/loadgen.py) beside the
# engine's batched decode (bench/gpu-serving.sh → bench/results/gpu_serving.json); on a host
# without the CUDA runtime set TDM_SERVE_DEVICE=cpu. make check runs it small on --device cpu.
EXTRA_DIST += bench/gpu-serving.sh bench/loadgen.py bench/serving_goals.py bench/serving_bound.py
bench-gpu-serving: tandem-worker
	bash $(top_srcdir)/bench/gpu-serving.sh '$(abs_top_builddir)' '$(abs_top_srcdir)'
.PHONY: bench-gpu-serving
TESTS += tests/integration/test-gpu-serving-cpu.sh tests/integration/test-serving-bound.sh \
	tests/integration/test-merge-price.sh tests/integration/test-ops-micro-json.sh
dist_check_SCRIPTS += tests/integration/test-gpu-serving-cpu.sh tests/integration/test-serving-bound.sh \
	tests/integration/test-merge-price.sh tests/integration/test-ops-micro-json.sh
EXTRA_DIST += bench/merge_mixed_price.py bench/ops_micro_json.py
