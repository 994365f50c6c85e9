# common/pg.mk — the private PostgreSQL cluster helper (initdb/pg_ctl as user postgres, adoption).
libtdmcommon_a_SOURCES += common/pgcluster.c
noinst_HEADERS += include/tdm/pgcluster.h
