# dataplane/sample — next-token choice (penalties, greedy, temperature, top-k/p, min-p, the
# (seed, step) draw, raw logprobs) and stop strings on streamed text. Pure logic, no deps.
noinst_LIBRARIES += libtdmsample.a
libtdmsample_a_SOURCES = \
	dataplane/sample/sample.c \
	dataplane/sample/stop.c
noinst_HEADERS += include/tdm/sample.h include/tdm/sample_fx.h

SAMPLE_TESTS = \
	tests/unit/test-sample \
	tests/unit/test-sample-stop
check_PROGRAMS += $(SAMPLE_TESTS)
TESTS += $(SAMPLE_TESTS)

# test-sample includes sample.c to reach the penalty stage directly
tests_unit_test_sample_SOURCES = tests/unit/test-sample.c
tests_unit_test_sample_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_sample_LDADD = $(COMMON_LIBS)
tests_unit_test_sample_stop_SOURCES = tests/unit/test-sample-stop.c
tests_unit_test_sample_stop_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_sample_stop_LDADD = libtdmsample.a $(COMMON_LIBS)
