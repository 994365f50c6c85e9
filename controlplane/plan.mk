# controlplane/plan.mk — `tandemctl plan`: the systemd layout of one host's P/D groups.
tandemctl_SOURCES += controlplane/plan.c
noinst_HEADERS += controlplane/plan.h
tandemctl_CPPFLAGS += -I$(top_srcdir)

# The plan's golden output, and every INI it emits resolved by tandem-worker's own parser.
dist_check_SCRIPTS += tests/integration/test-tandemctl-plan.sh
TESTS += tests/integration/test-tandemctl-plan.sh
EXTRA_DIST += tests/fixtures/plan/gpus8.txt tests/fixtures/plan/gpus8.json
