# dataplane/sched/ — plan (I1), scheduler, executor, loops, launcher (docs/serving.md).
noinst_LIBRARIES += libtdmsched.a
libtdmsched_a_SOURCES = \
	dataplane/sched/plan_codec.c \
	dataplane/sched/fault.c \
	dataplane/sched/exec.c \
	dataplane/sched/prefix.c \
	dataplane/sched/sched.c \
	dataplane/sched/sched_batch.c \
	dataplane/sched/sched_events.c \
	dataplane/sched/sched_pd.c \
	dataplane/sched/loop.c \
	kernels/cuda/loader.c
# --device cuda without a linked CUDA runtime loads $(pkglibdir)/backend-cuda.so (kernels/cuda/module.h)
libtdmsched_a_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir) $(SYSTEMD_CFLAGS) \
	-DTDM_PKGLIBDIR='"$(pkglibdir)"'

if HAVE_CUDA_RT
if !CUDA_MODULE
# --device cuda: exec.c calls the CUDA adapter (kernels/cuda/exec_cuda.h) in libtdmcuda.a; with
# --enable-cuda-module it loads backend-cuda.so instead and the worker links no CUDA library
libtdmsched_a_CPPFLAGS += -DTDM_HAVE_CUDA_RT=1
SCHED_CUDA_LIBS = libtdmcuda.a
SCHED_CUDA_SYS = $(CUDA_LIBS) -lstdc++
if HAVE_NCCL
# --device cuda at --tp-size > 1: the GPU collectives (dataplane/tp/gpu.h: NCCL, host-staged)
libtdmsched_a_CPPFLAGS += -DTDM_SCHED_GPU_TP=1
SCHED_CUDA_LIBS += libtdmtpgpu.a
SCHED_CUDA_SYS += $(NCCL_LIBS)
endif
endif
endif
noinst_HEADERS += dataplane/sched/plan_codec.h dataplane/sched/sched.h dataplane/sched/fault.h \
	dataplane/sched/sched_int.h dataplane/sched/sched_state.h

check_PROGRAMS += tests/unit/test-plan
TESTS += tests/unit/test-plan
tests_unit_test_plan_SOURCES = tests/unit/test-plan.c
tests_unit_test_plan_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir)
tests_unit_test_plan_LDADD = libtdmsched.a $(COMMON_LIBS)

# The serving runtime's libraries, in link order (the worker, the tests).
SCHED_LIBS = libtdmsched.a $(SCHED_CUDA_LIBS) libtdmxfer.a libtdmgraph.a libtdmkernels.a \
	libtdmkv.a libtdmmodel.a libtdmtok.a libtdmsample.a libtdmtp.a $(UCX_LIBS) $(SCHED_CUDA_SYS) \
	$(SYSTEMD_LIBS)

# Scheduler logic in-process at TP=1 on a fixture, both loops, against the one-shot engine.
check_PROGRAMS += tests/unit/test-sched
TESTS += tests/unit/test-sched
tests_unit_test_sched_SOURCES = tests/unit/test-sched.c
tests_unit_test_sched_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir)
tests_unit_test_sched_LDADD = libtdmoneshot.a $(SCHED_LIBS) $(COMMON_LIBS)

# HiCache in the serving worker (models/demo, a small device pool): the fp8-formula refusal at
# start, outputs bit-identical on/off for each write policy, layout and copy path, the forced
# layout mismatch and skip_layer_gate raising CORRUPTION, 64 sessions with aborts leaking nothing.
TESTS += tests/integration/test-hicache.sh
dist_check_SCRIPTS += tests/integration/test-hicache.sh

# The launcher end to end: TP=2 == TP=1 bit for bit in both loops, SIGTERM, kill -9 of a rank.
TESTS += tests/integration/test-serving.sh
dist_check_SCRIPTS += tests/integration/test-serving.sh

# A loop hung while idle (stall_loop on rank 0), a request sent after: /health 503 naming rank 0
# and the queued request, rank 0's telemetry shows it waiting (WEDGE's input), both loops.
TESTS += tests/integration/test-idle-hang.sh
dist_check_SCRIPTS += tests/integration/test-idle-hang.sh

# PD in the serving worker: prefill + decode + colocated workers on models/demo over
# real UCX — bit-identical output, refusals, bad frames at the bootstrap port, drained pages;
# the abort storm (60 sessions, client killed twice, probes' TTFT, no room or page left); and
# kill -9 of the prefill under traffic, then a new prefill on the same port; and a decode pool
# too small for its batch (retraction after commit, local recompute, output unchanged); the PD
# fault points and the checksum knob (faults); bit flips caught / changing output (flips); PD at
# --tp-size 2 (tp; skips until exec.c places the pool in tdm_exec_cfg_t.kv_mem); multi-turn
# sessions whose rooms name only the pages decode does not hold (prefix).
PD_TESTS = tests/integration/test-pd.sh tests/integration/test-pd-storm.sh \
	tests/integration/test-pd-peer.sh tests/integration/test-pd-retract.sh \
	tests/integration/test-pd-faults.sh tests/integration/test-pd-flips.sh \
	tests/integration/test-pd-tp.sh tests/integration/test-pd-prefix.sh
TESTS += $(PD_TESTS)
dist_check_SCRIPTS += $(PD_TESTS)
# a worker started twice under one PID: two instance ids, both runs' telemetry stored
TESTS += tests/integration/test-instance-id.sh
dist_check_SCRIPTS += tests/integration/test-instance-id.sh
