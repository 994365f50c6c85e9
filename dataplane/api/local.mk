# dataplane/api — the worker's HTTP surface on h2o (libh2o-evloop): /health, /ready, /metrics,
# /admin/..., POST /generate (docs/serving.md). The library is linked into tandem-worker together
# with the scheduler; the unit test links it against an in-test fake of sched.h instead.
noinst_LIBRARIES += libtdmapi.a
libtdmapi_a_SOURCES = \
	dataplane/api/server.c \
	dataplane/api/access.c \
	dataplane/api/handlers.c \
	dataplane/api/generate.c \
	dataplane/api/metrics.c \
	dataplane/api/openai.c \
	dataplane/api/openai_req.c \
	dataplane/api/openai_resp.c
libtdmapi_a_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir) $(H2O_CFLAGS)
noinst_HEADERS += dataplane/api/api.h dataplane/api/api_int.h dataplane/api/openai_int.h
TDM_API_LIBS = libtdmapi.a libtdmchat.a libtdmtok.a libtdmsample.a libtdmhttpd.a $(H2O_LIBS) $(COMMON_LIBS)

check_PROGRAMS += tests/unit/test-api
TESTS += tests/unit/test-api
tests_unit_test_api_SOURCES = tests/unit/test-api.c tests/unit/api-testutil.h
tests_unit_test_api_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir) $(H2O_CFLAGS)
tests_unit_test_api_LDADD = libtdmapi.a libtdmtp.a libtdmchat.a libtdmtok.a libtdmsample.a \
	libtdmhttpd.a $(H2O_LIBS) $(COMMON_LIBS)

# End to end on a real CPU worker (skips while tandem-worker has no serving mode).
TESTS += tests/integration/test-api.sh
dist_check_SCRIPTS += tests/integration/test-api.sh

# The OpenAI endpoint (openai*.c): parsing, shaping and the handlers on a real h2o loop against
# an in-test scheduler that streams scripted text (tests/unit/test-openai.c); every malformed
# request then a valid one (tests/unit/test-openai-malformed.c); the request parser's fuzz corpus.
check_PROGRAMS += tests/unit/test-openai tests/unit/test-openai-malformed
TESTS += tests/unit/test-openai tests/unit/test-openai-malformed
tests_unit_test_openai_SOURCES = tests/unit/test-openai.c tests/unit/openai-fakesched.h \
	tests/unit/api-testutil.h
tests_unit_test_openai_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir) $(H2O_CFLAGS)
tests_unit_test_openai_LDADD = libtdmapi.a libtdmtp.a libtdmchat.a libtdmtok.a libtdmsample.a \
	libtdmhttpd.a $(H2O_LIBS) $(COMMON_LIBS)
tests_unit_test_openai_malformed_SOURCES = tests/unit/test-openai-malformed.c \
	tests/unit/openai-fakesched.h tests/unit/api-testutil.h
tests_unit_test_openai_malformed_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir) $(H2O_CFLAGS)
tests_unit_test_openai_malformed_LDADD = $(tests_unit_test_openai_LDADD)

check_PROGRAMS += tests/fuzz/replay-openai
TESTS += tests/fuzz/replay-openai
tests_fuzz_replay_openai_SOURCES = tests/fuzz/fuzz-openai.c tests/fuzz/replay.c
tests_fuzz_replay_openai_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir)
tests_fuzz_replay_openai_LDADD = libtdmapi.a libtdmchat.a libtdmtok.a libtdmsample.a $(COMMON_LIBS)
FUZZ_BINS += fuzz/fuzz-openai
OAI_FUZZ_SRCS = \
	$(top_srcdir)/tests/fuzz/fuzz-openai.c \
	$(top_srcdir)/dataplane/api/openai_req.c \
	$(top_srcdir)/dataplane/api/openai_resp.c \
	$(top_srcdir)/dataplane/tokenizer/chat.c \
	$(top_srcdir)/dataplane/tokenizer/chat_py.c \
	$(top_srcdir)/dataplane/tokenizer/dsml.c \
	$(top_srcdir)/dataplane/tokenizer/load.c \
	$(top_srcdir)/dataplane/tokenizer/load_steps.c \
	$(top_srcdir)/dataplane/tokenizer/encode.c \
	$(top_srcdir)/dataplane/tokenizer/pretok.c \
	$(top_srcdir)/dataplane/tokenizer/decode.c \
	$(top_srcdir)/dataplane/tokenizer/map.c \
	$(top_srcdir)/dataplane/tokenizer/unicode.c \
	$(top_srcdir)/dataplane/sample/sample.c \
	$(top_srcdir)/dataplane/sample/stop.c \
	$(top_srcdir)/common/json.c \
	$(top_srcdir)/common/mem.c \
	$(top_srcdir)/common/arena.c \
	$(top_srcdir)/common/log.c \
	$(top_srcdir)/common/time.c \
	$(top_srcdir)/common/status.c
fuzz/fuzz-openai: $(OAI_FUZZ_SRCS)
	$(TDM_FUZZ_LINK) -I$(top_srcdir) -I$(top_srcdir)/dataplane/tokenizer $(XXHASH_CFLAGS) \
		$(OAI_FUZZ_SRCS) $(JANSSON_LIBS) $(XXHASH_LIBS) -lpthread -lm

# The acceptance test with the official `openai` npm client against a CPU worker on models/demo.
TESTS += tests/integration/test-openai.sh
dist_check_SCRIPTS += tests/integration/test-openai.sh
EXTRA_DIST += tests/integration/test-openai.mjs tests/integration/package.json \
	tests/integration/package-lock.json tests/fuzz/corpus/openai
# a stop with open streams and idle keep-alive connections: every stream ended, the group exits 0
TESTS += tests/integration/test-stop-streams.sh
dist_check_SCRIPTS += tests/integration/test-stop-streams.sh
# a deadlocked group ends its requests with an error; decode without prefill answers 503 up front
TESTS += tests/integration/test-hang-fail.sh
dist_check_SCRIPTS += tests/integration/test-hang-fail.sh
