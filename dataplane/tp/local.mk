# dataplane/tp/ — collectives (shm on CPU, NCCL on GPU) behind one interface, the recorder (I2)
# and the shared progress page that /health reads (I8).
noinst_LIBRARIES += libtdmtp.a
libtdmtp_a_SOURCES = \
	dataplane/tp/progress.c \
	dataplane/tp/comm.c \
	dataplane/tp/shm.c
libtdmtp_a_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)
noinst_HEADERS += dataplane/tp/comm.h include/tdm/progress.h

check_PROGRAMS += tests/unit/test-tp-shm
TESTS += tests/unit/test-tp-shm
tests_unit_test_tp_shm_SOURCES = tests/unit/test-tp-shm.c
tests_unit_test_tp_shm_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir)
tests_unit_test_tp_shm_LDADD = libtdmtp.a libtdmkernels.a $(COMMON_LIBS)

# GPU ranks (docs/design.md §3): NCCL (nccl.c, every call through its injection wrapper) and the
# host-staged shared-memory collectives (gpu.c) behind the CUDA engine's tdm_cuda_coll_t.
noinst_HEADERS += dataplane/tp/gpu.h dataplane/tp/nccl.h
EXTRA_DIST += dataplane/tp/gpu.c dataplane/tp/nccl.c
if HAVE_NCCL
noinst_LIBRARIES += libtdmtpgpu.a
libtdmtpgpu_a_SOURCES = dataplane/tp/gpu.c dataplane/tp/nccl.c
libtdmtpgpu_a_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir) $(CUDA_CFLAGS)

# CPU-side: the device marks' fold (coll_hash), the host half of the host-staged backend across
# processes, and the NCCL wrapper's error paths with injected codes (the real library, no device).
check_PROGRAMS += tests/unit/test-tp-gpu
TESTS += tests/unit/test-tp-gpu
tests_unit_test_tp_gpu_SOURCES = tests/unit/test-tp-gpu.c
tests_unit_test_tp_gpu_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir) $(CUDA_CFLAGS)
tests_unit_test_tp_gpu_LDADD = libtdmtpgpu.a libtdmtp.a libtdmkernels.a $(COMMON_LIBS) \
	$(NCCL_LIBS) $(CUDA_LIBS)
endif
