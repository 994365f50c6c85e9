# controlplane/ctl/ctl.mk — tandemctl: the REST client, its renderers, and `tandemctl plan` (the
# systemd layout of one host's P/D groups). Included from controlplane/local.mk.
tandemctl_SOURCES = controlplane/ctl/tandemctl.c controlplane/ctl/ctl_render.c \
	controlplane/ctl/ctl_plan.c
noinst_HEADERS += controlplane/ctl/ctl.h controlplane/ctl/ctl_plan.h
tandemctl_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir) $(CURL_CFLAGS)
tandemctl_LDADD = $(CURL_LIBS) $(COMMON_LIBS)

# The plan's golden output, and every INI it emits resolved by tandem-worker's own parser.
dist_check_SCRIPTS += tests/integration/test-tandemctl-plan.sh
TESTS += tests/integration/test-tandemctl-plan.sh
EXTRA_DIST += tests/fixtures/plan/gpus8.txt tests/fixtures/plan/gpus8.json
