# tools/ — developer programs and scripts: the PostgreSQL helper CLI (`tdm-pg`, used by
# `make check`), the device bundle/run scripts, and the tests that guard them.
noinst_PROGRAMS += tdm-pg
tdm_pg_SOURCES = tools/tdm-pg.c
tdm_pg_LDADD = $(COMMON_LIBS)

# (device scripts are registered once they exist)

# Integration test of the PostgreSQL helper (a real server; runs as root in CI).
check_PROGRAMS += tests/integration/test-pg
TESTS += tests/integration/test-pg
tests_integration_test_pg_SOURCES = tests/integration/test-pg.c
tests_integration_test_pg_CPPFLAGS = $(TEST_CPPFLAGS) $(LIBPQ_CFLAGS)
tests_integration_test_pg_LDADD = $(COMMON_LIBS) $(LIBPQ_LIBS)
noinst_HEADERS += tests/pgtest.h
TESTS += tests/integration/test-pg-cli.sh
dist_check_SCRIPTS += tests/integration/test-pg-cli.sh

# Device workflow (docs/device.md): bundle a build for the GPU machine, run its GPU tests there.
EXTRA_DIST += tools/device-bundle.sh tools/device-run.sh tools/device-postgres.sh \
	tools/device-verify.sh

# README.md's architecture map must name only paths that exist.
TESTS += tests/unit/test-archmap.sh
dist_check_SCRIPTS += tests/unit/test-archmap.sh
# The tree's shape with fixed thresholds: no circle between folders, only the worker's main.c
# reaches into dataplane/worker/, at most 6 source files over 800 lines, no citation of documents
# outside the repository, no ok() with a constant condition in tests.
TESTS += tests/unit/test-structure.sh
dist_check_SCRIPTS += tests/unit/test-structure.sh
# tandemd across a restart of a tdm-pg cluster: same address, reconnect, /health db down meanwhile
TESTS += tests/integration/test-cp-pg-restart.sh
dist_check_SCRIPTS += tests/integration/test-cp-pg-restart.sh
