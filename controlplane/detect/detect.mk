# controlplane/detect/detect.mk — detectors (docs/design.md §4), the alert store and the alert webhook.
# Included from controlplane/local.mk; the objects join libtdmcp.a so tandemd links them.
libtdmcp_a_SOURCES += \
	controlplane/detect/detect.c \
	controlplane/detect/detect_rules.c \
	controlplane/detect/alert.c \
	controlplane/detect/detect_webhook.c \
	controlplane/detect/detect_persist.c
# the webhook posts with libcurl
libtdmcp_a_CPPFLAGS += $(CURL_CFLAGS)
TDM_CP_LIBS += $(CURL_LIBS)
noinst_HEADERS += \
	controlplane/detect/detect.h \
	controlplane/detect/detect_int.h \
	controlplane/detect/alert.h

# Unit tests: every rule on replayed/synthesised streams over a virtual clock.
DETECT_UNIT_TESTS = \
	tests/unit/test-detect \
	tests/unit/test-detect-webhook
check_PROGRAMS += $(DETECT_UNIT_TESTS)
TESTS += $(DETECT_UNIT_TESTS)
noinst_HEADERS += tests/unit/detect-replay.h
tests_unit_test_detect_SOURCES = tests/unit/test-detect.c
tests_unit_test_detect_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir) $(H2O_CFLAGS) $(LIBPQ_CFLAGS) \
	-DTDM_STREAMS_DIR='"$(top_srcdir)/tests/fixtures/streams"'
tests_unit_test_detect_LDADD = $(TDM_CP_LIBS)
tests_unit_test_detect_webhook_SOURCES = tests/unit/test-detect-webhook.c
tests_unit_test_detect_webhook_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir) $(H2O_CFLAGS) $(LIBPQ_CFLAGS)
tests_unit_test_detect_webhook_LDADD = $(TDM_CP_LIBS)

# Integration: the detectors inside a real tandemd against the test PostgreSQL (make check).
check_PROGRAMS += tests/integration/test-detect-tandemd
TESTS += tests/integration/test-detect-tandemd
tests_integration_test_detect_tandemd_SOURCES = tests/integration/test-detect-tandemd.c
tests_integration_test_detect_tandemd_CPPFLAGS = $(TEST_CPPFLAGS) $(LIBPQ_CFLAGS) $(CURL_CFLAGS)
tests_integration_test_detect_tandemd_LDADD = $(LIBPQ_LIBS) $(CURL_LIBS) $(COMMON_LIBS)
