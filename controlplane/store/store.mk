# controlplane/store/store.mk — the database side of tandemd: the DB threads (queries, ingest and
# group commit), the batch blob, the outage spool, migrations, the in-memory ring and history
# cache. Included from controlplane/local.mk; the objects join libtdmcp.a.
libtdmcp_a_SOURCES += \
	controlplane/store/buf.c \
	controlplane/store/ring.c \
	controlplane/store/batch.c \
	controlplane/store/db_spool.c \
	controlplane/store/migrate.c \
	controlplane/store/db.c \
	controlplane/store/db_query.c \
	controlplane/store/db_commit.c \
	controlplane/store/db_ingest.c \
	controlplane/store/hist.c
noinst_HEADERS += \
	controlplane/store/buf.h \
	controlplane/store/ring.h \
	controlplane/store/batch.h \
	controlplane/store/db_spool.h \
	controlplane/store/migrate.h \
	controlplane/store/db.h \
	controlplane/store/db_int.h \
	controlplane/store/hist.h
