# dataplane/report — the per-rank telemetry reporter (docs/design.md §1, docs/contracts.md §c, I9): 200 ms snapshots of
# the progress page, events at once, keep-alive libcurl POSTs, framed spool files, replay.
noinst_LIBRARIES += libtdmreport.a
libtdmreport_a_SOURCES = \
	dataplane/report/report.c \
	dataplane/report/report_spool.c
libtdmreport_a_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir) $(CURL_CFLAGS)
noinst_HEADERS += dataplane/report/report.h dataplane/report/report_int.h
TDM_REPORT_LIBS = libtdmreport.a libtdmtp.a $(CURL_LIBS) $(COMMON_LIBS)

# Against a local HTTP sink that goes down and comes back (no control plane needed).
check_PROGRAMS += tests/unit/test-report
TESTS += tests/unit/test-report
tests_unit_test_report_SOURCES = tests/unit/test-report.c
tests_unit_test_report_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir) $(CURL_CFLAGS)
tests_unit_test_report_LDADD = $(TDM_REPORT_LIBS)
# a clean stop sends `shutdown`: no WORKER_LOST in a real tandemd
TESTS += tests/integration/test-clean-stop.sh
dist_check_SCRIPTS += tests/integration/test-clean-stop.sh
