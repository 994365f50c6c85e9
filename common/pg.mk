# common/pg.mk — the private PostgreSQL cluster helper (initdb/pg_ctl as user postgres, adoption).
libtdmcommon_a_SOURCES += common/pgcluster.c common/pgport.c common/pgproc.c
noinst_HEADERS += common/pg_int.h
noinst_HEADERS += include/tdm/pgcluster.h
