# dataplane/worker.mk — the tandem-worker binary. main.c dispatches; today it runs the one-shot
# CLI (DESIGN §10f) on a scheduler-less CPU engine that bench/cpu_engine shares.
bin_PROGRAMS += tandem-worker
noinst_LIBRARIES += libtdmoneshot.a
libtdmoneshot_a_SOURCES = dataplane/oneshot_engine.c
libtdmoneshot_a_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)
noinst_HEADERS += dataplane/oneshot.h dataplane/oneshot_engine.h
WORKER_ENGINE_LIBS = libtdmoneshot.a libtdmgraph.a libtdmkernels.a libtdmkv.a libtdmmodel.a

tandem_worker_SOURCES = dataplane/main.c dataplane/oneshot.c
tandem_worker_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)
tandem_worker_LDADD = $(SCHED_LIBS) $(WORKER_ENGINE_LIBS) libtdmtok.a libtdmsample.a $(COMMON_LIBS)

# End to end on every fixture model against the transformers goldens, plus the error paths.
TESTS += tests/integration/test-oneshot.sh
dist_check_SCRIPTS += tests/integration/test-oneshot.sh
