# tests/ — unit tests mirror the tree (tests/unit/test-<module>.c); integration tests start real
# processes. Every test prints TAP.
noinst_HEADERS += tests/tap.h

UNIT_TESTS = \
	tests/unit/test-status
check_PROGRAMS += $(UNIT_TESTS)
TESTS += $(UNIT_TESTS)

tests_unit_test_status_SOURCES = tests/unit/test-status.c
tests_unit_test_status_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_status_LDADD = $(COMMON_LIBS)
EXTRA_DIST += tests/fuzz/README.md tests/fuzz/corpus
# fixtures and the bundled demo model ship in the tarball (make distcheck runs the tests)
EXTRA_DIST += tests/fixtures models/demo
# the in-test scheduler the api unit tests share (included by test-api.c and openai-fakesched.h)
EXTRA_DIST += tests/unit/fakesched.h
# shared by the shell integration tests (sourced / imported from $SRC/tests/integration)
EXTRA_DIST += tests/integration/tap-lib.sh tests/integration/worker-lib.sh tests/integration/taplib.py tests/integration/pdlib.py tests/integration/streams.py tests/integration/telemetry-sink.py \
	tests/integration/cp-lib.sh
