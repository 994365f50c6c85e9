# dataplane/worker.mk — the tandem-worker binary, whose process lives in dataplane/worker/:
# main.c dispatches to the one-shot CLI (docs/contracts.md §f) on a scheduler-less CPU engine that
# bench/cpu_engine shares, or to the serving runtime (launcher.c, rank*.c; worker.h), to which it
# hands explicit hook tables: the HTTP layer (dataplane/api, through http_hooks.c) and the
# telemetry reporter (dataplane/report, through report_hooks.c). No weak symbols, no -Wl,-u.
bin_PROGRAMS += tandem-worker
noinst_LIBRARIES += libtdmoneshot.a
libtdmoneshot_a_SOURCES = dataplane/oneshot_engine.c
libtdmoneshot_a_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)
noinst_HEADERS += dataplane/oneshot.h dataplane/oneshot_engine.h
WORKER_ENGINE_LIBS = libtdmoneshot.a libtdmgraph.a libtdmkernels.a libtdmkv.a libtdmmodel.a

tandem_worker_SOURCES = \
	dataplane/worker/main.c \
	dataplane/worker/launcher.c \
	dataplane/worker/rank.c \
	dataplane/worker/rank_pd.c \
	dataplane/worker/rank_selftest.c \
	dataplane/worker/worker_hicache.c \
	dataplane/worker/http_hooks.c \
	dataplane/worker/report_hooks.c \
	dataplane/oneshot.c
noinst_HEADERS += dataplane/worker/worker.h dataplane/worker/worker_int.h dataplane/worker/hooks.h
tandem_worker_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir) $(SYSTEMD_CFLAGS) $(H2O_CFLAGS) \
	$(CURL_CFLAGS)
if HAVE_CUDA_RT
if !CUDA_MODULE
# rank.c refuses --device cuda PD without the CUDA runtime (dataplane/sched/local.mk)
tandem_worker_CPPFLAGS += -DTDM_HAVE_CUDA_RT=1
if HAVE_NCCL
# rank.c accepts --device cuda at --tp-size > 1 (the GPU collectives, dataplane/sched/local.mk)
tandem_worker_CPPFLAGS += -DTDM_SCHED_GPU_TP=1
endif
endif
endif
tandem_worker_LDADD = libtdmapi.a libtdmchat.a libtdmreport.a $(SCHED_LIBS) $(WORKER_ENGINE_LIBS) \
	libtdmtok.a libtdmsample.a libtdmtp.a libtdmhttpd.a $(H2O_LIBS) $(CURL_LIBS) $(COMMON_LIBS)

# End to end on every fixture model against the transformers goldens, plus the error paths.
TESTS += tests/integration/test-oneshot.sh
dist_check_SCRIPTS += tests/integration/test-oneshot.sh
TESTS += tests/integration/test-chat-hf5.sh
dist_check_SCRIPTS += tests/integration/test-chat-hf5.sh

# The serving runtime under load and faults through the real launcher, HTTP layer and progress
# page: tests/integration/test-load is their client (streams, drain, /health polling, page dump).
check_PROGRAMS += tests/integration/test-load
tests_integration_test_load_SOURCES = tests/integration/test-load.c
tests_integration_test_load_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir)
tests_integration_test_load_LDADD = libtdmtp.a $(COMMON_LIBS)
TESTS += tests/integration/test-load.sh
dist_check_SCRIPTS += tests/integration/test-load.sh

# Faults through /admin/faults on a TP=2 group: rank_idle_path and stall_loop → /health 503
# within T+1 s naming the rank, the recorder's data; kill -9 → worker_lost at a local sink.
TESTS += tests/integration/test-serving-faults.sh
dist_check_SCRIPTS += tests/integration/test-serving-faults.sh

# A rank that cannot start (its HTTP or bootstrap port taken, an unusable chat template, a model
# without weights): the group exits 1 naming the rank, the port and errno, and its worker_lost
# carries the reason; never "group exited cleanly".
TESTS += tests/integration/test-start-fail.sh
dist_check_SCRIPTS += tests/integration/test-start-fail.sh
