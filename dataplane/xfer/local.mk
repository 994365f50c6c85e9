# dataplane/xfer/ — PD transfer: rooms (KVPoll, I4), bootstrap, abort handshake, data movers.
noinst_LIBRARIES += libtdmxfer.a
libtdmxfer_a_SOURCES = \
	dataplane/xfer/room.c \
	dataplane/xfer/engine.c \
	dataplane/xfer/outq.c \
	dataplane/xfer/recv.c \
	dataplane/xfer/mover.c \
	dataplane/xfer/bootstrap.c \
	dataplane/xfer/prefill.c \
	dataplane/xfer/decode.c \
	dataplane/xfer/ucx.c \
	dataplane/xfer/checksum.c \
	dataplane/xfer/kvmem.c
noinst_HEADERS += dataplane/xfer/room.h dataplane/xfer/xfer_int.h include/tdm/xfer.h \
	dataplane/xfer/cuda_ipc.h kernels/cuda/xfer_ops.h
libtdmxfer_a_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir) $(UCX_CFLAGS)
# what a program that runs the engine links (the KV pool comes from libtdmkv)
XFER_LIBS = libtdmxfer.a libtdmkv.a libtdmtp.a $(UCX_LIBS) $(COMMON_LIBS)
# GPU KV pools (cfg.kv_cuda) move by CUDA IPC: the mover and its checksum kernel are built only
# with a linkable CUDA runtime; without one the engine refuses a device pool (cuda_ipc.h).
EXTRA_DIST += kernels/cuda/xfer_ops.cu
# (--enable-cuda-module: the worker links no CUDA library, so no CUDA IPC mover: PD between
# --device cuda groups needs a worker built with the runtime linked in)
if HAVE_CUDA_RT
if !CUDA_MODULE
libtdmxfer_a_SOURCES += dataplane/xfer/cuda_ipc.c kernels/cuda/xfer_ops.cu
libtdmxfer_a_CPPFLAGS += -DTDM_HAVE_CUDA_RT=1 $(CUDA_CFLAGS)
XFER_LIBS += $(CUDA_LIBS) -lstdc++
# GPU tests (skip without a device): the hash kernel vs the CPU, CUDA IPC across two processes;
# PD between two --device cuda workers on one GPU.
check_PROGRAMS += tests/gpu/test-xfer-cuda
TESTS += tests/gpu/test-xfer-cuda tests/gpu/test-pd-cuda.sh
tests_gpu_test_xfer_cuda_SOURCES = tests/gpu/test-xfer-cuda.c
tests_gpu_test_xfer_cuda_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir) $(UCX_CFLAGS) $(CUDA_CFLAGS) \
	-DTDM_HAVE_CUDA_RT=1
tests_gpu_test_xfer_cuda_LDADD = $(XFER_LIBS)
# The engine's GPU path on any host: over a CUDA runtime test double (no device, no cudart).
check_PROGRAMS += tests/unit/test-xfer-cudaipc
TESTS += tests/unit/test-xfer-cudaipc
tests_unit_test_xfer_cudaipc_SOURCES = tests/unit/test-xfer-cudaipc.c tests/unit/cudart-fake.c
tests_unit_test_xfer_cudaipc_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir) $(UCX_CFLAGS) \
	$(CUDA_CFLAGS) -DTDM_HAVE_CUDA_RT=1
tests_unit_test_xfer_cudaipc_LDADD = libtdmxfer.a libtdmkv.a libtdmtp.a $(UCX_LIBS) $(COMMON_LIBS)
endif
endif
EXTRA_DIST += tests/gpu/test-pd-cuda.sh

check_PROGRAMS += tests/unit/test-xfer-room
TESTS += tests/unit/test-xfer-room
tests_unit_test_xfer_room_SOURCES = tests/unit/test-xfer-room.c
tests_unit_test_xfer_room_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir)
tests_unit_test_xfer_room_LDADD = libtdmxfer.a $(COMMON_LIBS)

XFER_TESTS = tests/unit/test-xfer tests/unit/test-xfer-storm tests/integration/test-xfer-bootstrap
check_PROGRAMS += $(XFER_TESTS)
TESTS += $(XFER_TESTS)
noinst_HEADERS += tests/unit/xfer-testutil.h
tests_unit_test_xfer_SOURCES = tests/unit/test-xfer.c
tests_unit_test_xfer_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir) $(UCX_CFLAGS)
tests_unit_test_xfer_LDADD = $(XFER_LIBS)
tests_unit_test_xfer_storm_SOURCES = tests/unit/test-xfer-storm.c
tests_unit_test_xfer_storm_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir) $(UCX_CFLAGS)
tests_unit_test_xfer_storm_LDADD = $(XFER_LIBS)
tests_integration_test_xfer_bootstrap_SOURCES = tests/integration/test-xfer-bootstrap.c
tests_integration_test_xfer_bootstrap_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir) $(UCX_CFLAGS)
tests_integration_test_xfer_bootstrap_LDADD = $(XFER_LIBS)
include bench/transfer.mk
