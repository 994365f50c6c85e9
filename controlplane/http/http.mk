# controlplane/http/http.mk — tandemd's HTTP side: the server, the route table and its handlers,
# auth, telemetry ingest, the event stream and the console (web/) compiled into tandemd.
# Included from controlplane/local.mk; the objects join libtdmcp.a.
libtdmcp_a_SOURCES += \
	controlplane/http/auth.c \
	controlplane/http/cp_server.c \
	controlplane/http/ingest.c \
	controlplane/http/routes.c \
	controlplane/http/rest_util.c \
	controlplane/http/rest_health.c \
	controlplane/http/rest_workers.c \
	controlplane/http/rest_reads.c \
	controlplane/http/rest_tokens.c \
	controlplane/http/rest_act.c \
	controlplane/http/v1_router.c \
	controlplane/http/console.c \
	controlplane/http/stream.c
nodist_libtdmcp_a_SOURCES += web/assets.c
noinst_HEADERS += \
	controlplane/http/auth.h \
	controlplane/http/cp_server.h \
	controlplane/http/rest.h \
	controlplane/http/console.h \
	controlplane/http/stream.h

# Both daemons' scaffold (common/httpd.c): a 20 MB body gets a 413 the client can read (lingering
# close), from Node's fetch and curl, on a worker and on tandemd.
dist_check_SCRIPTS += tests/integration/test-http-413.sh
TESTS += tests/integration/test-http-413.sh
EXTRA_DIST += tests/integration/big-body.mjs

# The /v1 router closes the upstream request as soon as its client resets (v1_router.c): the
# worker counts the disconnect while its loop is stalled, long before the next chunk.
dist_check_SCRIPTS += tests/integration/test-router-abort.sh
TESTS += tests/integration/test-router-abort.sh
