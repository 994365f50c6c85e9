# The console (web/) compiled into tandemd.
libtdmcp_a_SOURCES += controlplane/console.c controlplane/stream.c
nodist_libtdmcp_a_SOURCES += web/assets.c
noinst_HEADERS += controlplane/console.h controlplane/stream.h
