# Control frames (include/tdm/frame.h): codec in libtdmcommon, unit test, fuzz target.
libtdmcommon_a_SOURCES += common/frame.c
noinst_HEADERS += include/tdm/frame.h

check_PROGRAMS += tests/unit/test-frame tests/fuzz/replay-frame
TESTS += tests/unit/test-frame tests/fuzz/replay-frame
tests_unit_test_frame_SOURCES = tests/unit/test-frame.c
tests_unit_test_frame_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_frame_LDADD = $(COMMON_LIBS)
tests_fuzz_replay_frame_SOURCES = tests/fuzz/fuzz-frame.c tests/fuzz/replay.c
tests_fuzz_replay_frame_CPPFLAGS = $(TEST_CPPFLAGS)
tests_fuzz_replay_frame_LDADD = $(COMMON_LIBS)
FUZZ_BINS += fuzz/fuzz-frame
fuzz/fuzz-frame: $(top_srcdir)/tests/fuzz/fuzz-frame.c $(top_srcdir)/common/frame.c $(top_srcdir)/common/layout.c $(top_srcdir)/common/json.c
	$(TDM_FUZZ_LINK) $^ $(JANSSON_LIBS) -lm
