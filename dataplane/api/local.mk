# dataplane/api — the worker's HTTP surface on h2o (libh2o-evloop): /health, /ready, /metrics,
# /admin/..., POST /generate (docs/serving.md). The library is linked into tandem-worker together
# with the scheduler; the unit test links it against an in-test fake of sched.h instead.
noinst_LIBRARIES += libtdmapi.a
libtdmapi_a_SOURCES = \
	dataplane/api/server.c \
	dataplane/api/handlers.c \
	dataplane/api/generate.c \
	dataplane/api/metrics.c \
	dataplane/api/glue.c
libtdmapi_a_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir) $(H2O_CFLAGS)
noinst_HEADERS += dataplane/api/api.h dataplane/api/api_int.h
TDM_API_LIBS = libtdmapi.a libtdmsample.a $(H2O_LIBS) $(COMMON_LIBS)

check_PROGRAMS += tests/unit/test-api
TESTS += tests/unit/test-api
tests_unit_test_api_SOURCES = tests/unit/test-api.c tests/unit/api-testutil.h
tests_unit_test_api_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir) $(H2O_CFLAGS)
tests_unit_test_api_LDADD = libtdmapi.a libtdmtp.a libtdmsample.a $(H2O_LIBS) $(COMMON_LIBS)
# glue.c implements worker.h's weak hooks tdm_api_serve/tdm_api_stop; the worker links it with
# `-Wl,-u,tdm_api_serve` (a weak reference alone does not pull it from the archive).

# End to end on a real CPU worker (skips while tandem-worker has no serving mode).
TESTS += tests/integration/test-api.sh
dist_check_SCRIPTS += tests/integration/test-api.sh
