# controlplane/act/act.mk — actions (drain/restart/reconfigure, audit), the supervisor, sd-bus,
# the canary and the router's group choice. Included from controlplane/local.mk; the objects join
# libtdmcp.a so tandemd links them.
libtdmcp_a_SOURCES += \
	controlplane/act/act.c \
	controlplane/act/act_shared.c \
	controlplane/act/act_override.c \
	controlplane/act/act_sdbus.c \
	controlplane/act/act_http.c \
	controlplane/act/act_super.c \
	controlplane/act/act_exec.c \
	controlplane/act/act_fault.c \
	controlplane/act/act_watch.c
noinst_HEADERS += \
	controlplane/act/act.h \
	controlplane/act/act_int.h

# Unit tests: config versions → override INI, the RestartUnit message, metrics parsing.
check_PROGRAMS += tests/unit/test-cp-act
TESTS += tests/unit/test-cp-act
tests_unit_test_cp_act_SOURCES = tests/unit/test-cp-act.c
tests_unit_test_cp_act_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir) $(H2O_CFLAGS) $(LIBPQ_CFLAGS) \
	$(SYSTEMD_CFLAGS)
tests_unit_test_cp_act_LDADD = $(TDM_CP_LIBS)

# Integration: supervised CPU workers behind a real tandemd (drain, router, reconfigure, restart,
# re-adoption, faults → alerts → actions); skips with a message when the worker cannot serve.
dist_check_SCRIPTS += tests/integration/test-cp-act.sh
TESTS += tests/integration/test-cp-act.sh

# README command 1's stack (tools/demo.sh) driven as an operator: tandemctl's conventions, the
# actions and their audit rows, promtool on every /metrics, every log line logfmt.
dist_check_SCRIPTS += tests/integration/test-demo-ops.sh
TESTS += tests/integration/test-demo-ops.sh
EXTRA_DIST += packaging/grafana-tandem.json
