# controlplane/ — tandemd (h2o loop, DB threads, ingest, ring, spool, auth, REST) and tandemctl.
bin_PROGRAMS += tandemd tandemctl

# The control plane's objects, shared by tandemd and the unit tests; each folder's fragment adds
# its own: store/ (database, ring, spool), detect/, act/, http/ (server, routes, console).
noinst_LIBRARIES += libtdmcp.a
libtdmcp_a_SOURCES =
nodist_libtdmcp_a_SOURCES = sql/migrations.c
libtdmcp_a_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir) $(H2O_CFLAGS) $(LIBPQ_CFLAGS) $(SYSTEMD_CFLAGS)
include controlplane/store/store.mk
include controlplane/http/http.mk
# libcrypto: SHA-256 of API tokens (h2o links it already).
TDM_CP_LIBS = libtdmcp.a libtdmhttpd.a $(H2O_LIBS) $(LIBPQ_LIBS) $(SYSTEMD_LIBS) $(LIBCRYPTO_LIBS) $(COMMON_LIBS)

tandemd_SOURCES = controlplane/tandemd.c
tandemd_CPPFLAGS = $(libtdmcp_a_CPPFLAGS)
tandemd_LDADD = $(TDM_CP_LIBS)


# Unit tests (pure logic: ring, batch blob, spool file format, auth, COPY escaping).
CP_UNIT_TESTS = \
	tests/unit/test-cp-ring \
	tests/unit/test-cp-spool \
	tests/unit/test-cp-auth \
	tests/unit/test-cp-hist
check_PROGRAMS += $(CP_UNIT_TESTS)
TESTS += $(CP_UNIT_TESTS)
tests_unit_test_cp_ring_SOURCES = tests/unit/test-cp-ring.c
tests_unit_test_cp_ring_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir) $(H2O_CFLAGS) $(LIBPQ_CFLAGS)
tests_unit_test_cp_ring_LDADD = $(TDM_CP_LIBS)
tests_unit_test_cp_spool_SOURCES = tests/unit/test-cp-spool.c
tests_unit_test_cp_spool_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir) $(H2O_CFLAGS) $(LIBPQ_CFLAGS)
tests_unit_test_cp_spool_LDADD = $(TDM_CP_LIBS)
tests_unit_test_cp_auth_SOURCES = tests/unit/test-cp-auth.c
tests_unit_test_cp_auth_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir) $(H2O_CFLAGS) $(LIBPQ_CFLAGS)
tests_unit_test_cp_auth_LDADD = $(TDM_CP_LIBS)
tests_unit_test_cp_hist_SOURCES = tests/unit/test-cp-hist.c
tests_unit_test_cp_hist_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir) $(H2O_CFLAGS) $(LIBPQ_CFLAGS)
tests_unit_test_cp_hist_LDADD = $(TDM_CP_LIBS)

# Integration tests: a real tandemd on port 0 against the test PostgreSQL (make check).
CP_INTEGRATION_TESTS = \
	tests/integration/test-cp-migrate.sh \
	tests/integration/test-cp-api \
	tests/integration/test-cp-outage
check_PROGRAMS += tests/integration/test-cp-api tests/integration/test-cp-outage
dist_check_SCRIPTS += tests/integration/test-cp-migrate.sh
TESTS += $(CP_INTEGRATION_TESTS)
noinst_HEADERS += tests/integration/cp-harness.h
tests_integration_test_cp_api_SOURCES = tests/integration/test-cp-api.c
tests_integration_test_cp_api_CPPFLAGS = $(TEST_CPPFLAGS) $(LIBPQ_CFLAGS) $(CURL_CFLAGS)
tests_integration_test_cp_api_LDADD = $(LIBPQ_LIBS) $(CURL_LIBS) $(COMMON_LIBS)
tests_integration_test_cp_outage_SOURCES = tests/integration/test-cp-outage.c
tests_integration_test_cp_outage_CPPFLAGS = $(TEST_CPPFLAGS) $(LIBPQ_CFLAGS) $(CURL_CFLAGS)
tests_integration_test_cp_outage_LDADD = $(LIBPQ_LIBS) $(CURL_LIBS) $(COMMON_LIBS)
include controlplane/detect/detect.mk
include controlplane/act/act.mk
include controlplane/ctl/ctl.mk
# a PostgreSQL outage under a reporting worker: no WORKER_LOST, a wedge alerted, events once
TESTS += tests/integration/test-cp-db-outage.sh
dist_check_SCRIPTS += tests/integration/test-cp-db-outage.sh
# the supervisor across restarts: stable ports, the spool, WORKER_LOST after WORKER_LOST
TESTS += tests/integration/test-cp-super.sh
dist_check_SCRIPTS += tests/integration/test-cp-super.sh
# a supervised group in a network namespace: the keys refused at load, a missing namespace
TESTS += tests/integration/test-cp-netns.sh
dist_check_SCRIPTS += tests/integration/test-cp-netns.sh
# 5 restarts with 8 open streams: no WORKER_LOST, every stream ended (TDM_RESTART_ROUNDS=20 long)
TESTS += tests/integration/test-restart-streams.sh
dist_check_SCRIPTS += tests/integration/test-restart-streams.sh
# a 10 s PostgreSQL outage under the auto policy on supervised groups (TDM_OUTAGE_S=60 long)
TESTS += tests/integration/test-cp-outage-auto.sh
dist_check_SCRIPTS += tests/integration/test-cp-outage-auto.sh
# the long forms of the two above (docs/alerts.md): a 60 s outage, 20 restarts with open streams
check-reliability-long: tandem-worker tandemd tandemctl tdm-pg
	TDM_OUTAGE_S=60 TDM_RESTART_ROUNDS=20 $(MAKE) $(AM_MAKEFLAGS) check \
	  TESTS='tests/integration/test-cp-outage-auto.sh tests/integration/test-restart-streams.sh'
.PHONY: check-reliability-long
