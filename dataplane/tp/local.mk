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
