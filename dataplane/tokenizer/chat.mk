# dataplane/tokenizer/chat.mk — chat template renderers (tdm/chat.h) and the DSML tool-call
# parser (tdm/dsml.h), with their unit tests and the demo model's held-out evaluation.
noinst_LIBRARIES += libtdmchat.a
libtdmchat_a_SOURCES = \
	dataplane/tokenizer/chat.c \
	dataplane/tokenizer/chat_py.c \
	dataplane/tokenizer/dsml.c \
	dataplane/tokenizer/toolcall.c \
	dataplane/tokenizer/toolcall_json.c \
	dataplane/tokenizer/jinja_lex.c \
	dataplane/tokenizer/jinja_parse.c \
	dataplane/tokenizer/jinja_stmt.c \
	dataplane/tokenizer/jinja_value.c \
	dataplane/tokenizer/jinja_eval.c \
	dataplane/tokenizer/jinja_exec.c \
	dataplane/tokenizer/jinja_builtins.c
noinst_HEADERS += include/tdm/chat.h include/tdm/dsml.h include/tdm/jinja.h include/tdm/toolcall.h dataplane/tokenizer/toolcall_int.h \
	dataplane/tokenizer/chat_int.h dataplane/tokenizer/jinja_int.h

CHAT_LIBS = libtdmchat.a $(COMMON_LIBS)

check_PROGRAMS += tests/unit/test-chat
TESTS += tests/unit/test-chat
tests_unit_test_chat_SOURCES = tests/unit/test-chat.c
tests_unit_test_chat_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir)/dataplane/tokenizer
tests_unit_test_chat_LDADD = libtdmchat.a $(TOK_LIBS)

check_PROGRAMS += tests/unit/test-jinja
TESTS += tests/unit/test-jinja
tests_unit_test_jinja_SOURCES = tests/unit/test-jinja.c
tests_unit_test_jinja_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir)/dataplane/tokenizer
tests_unit_test_jinja_LDADD = $(CHAT_LIBS)

check_PROGRAMS += tests/fuzz/replay-jinja
TESTS += tests/fuzz/replay-jinja
tests_fuzz_replay_jinja_SOURCES = tests/fuzz/fuzz-jinja.c tests/fuzz/replay.c
tests_fuzz_replay_jinja_CPPFLAGS = $(TEST_CPPFLAGS)
tests_fuzz_replay_jinja_LDADD = $(CHAT_LIBS)
FUZZ_BINS += fuzz/fuzz-jinja
JINJA_FUZZ_SRCS = \
	$(top_srcdir)/tests/fuzz/fuzz-jinja.c \
	$(top_srcdir)/dataplane/tokenizer/jinja_lex.c \
	$(top_srcdir)/dataplane/tokenizer/jinja_parse.c \
	$(top_srcdir)/dataplane/tokenizer/jinja_stmt.c \
	$(top_srcdir)/dataplane/tokenizer/jinja_value.c \
	$(top_srcdir)/dataplane/tokenizer/jinja_eval.c \
	$(top_srcdir)/dataplane/tokenizer/jinja_exec.c \
	$(top_srcdir)/dataplane/tokenizer/jinja_builtins.c \
	$(top_srcdir)/dataplane/tokenizer/chat_py.c \
	$(top_srcdir)/common/mem.c \
	$(top_srcdir)/common/log.c \
	$(top_srcdir)/common/status.c
fuzz/fuzz-jinja: $(JINJA_FUZZ_SRCS)
	$(TDM_FUZZ_LINK) -I$(top_srcdir)/dataplane/tokenizer $(JINJA_FUZZ_SRCS) $(JANSSON_LIBS) -lm

check_PROGRAMS += tests/unit/test-toolcall
TESTS += tests/unit/test-toolcall
tests_unit_test_toolcall_SOURCES = tests/unit/test-toolcall.c
tests_unit_test_toolcall_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir)/dataplane/tokenizer
tests_unit_test_toolcall_LDADD = $(CHAT_LIBS)

check_PROGRAMS += tests/fuzz/replay-toolcall
TESTS += tests/fuzz/replay-toolcall
tests_fuzz_replay_toolcall_SOURCES = tests/fuzz/fuzz-toolcall.c tests/fuzz/replay.c
tests_fuzz_replay_toolcall_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir)/dataplane/tokenizer
tests_fuzz_replay_toolcall_LDADD = $(CHAT_LIBS)
FUZZ_BINS += fuzz/fuzz-toolcall
TOOLCALL_FUZZ_SRCS = \
	$(top_srcdir)/tests/fuzz/fuzz-toolcall.c \
	$(top_srcdir)/dataplane/tokenizer/toolcall.c \
	$(top_srcdir)/dataplane/tokenizer/toolcall_json.c \
	$(top_srcdir)/dataplane/tokenizer/dsml.c \
	$(top_srcdir)/dataplane/tokenizer/chat_py.c \
	$(top_srcdir)/common/mem.c \
	$(top_srcdir)/common/log.c \
	$(top_srcdir)/common/status.c
fuzz/fuzz-toolcall: $(TOOLCALL_FUZZ_SRCS)
	$(TDM_FUZZ_LINK) -I$(top_srcdir)/dataplane/tokenizer $(TOOLCALL_FUZZ_SRCS) $(JANSSON_LIBS) -lm

check_PROGRAMS += tests/unit/test-dsml
TESTS += tests/unit/test-dsml
tests_unit_test_dsml_SOURCES = tests/unit/test-dsml.c
tests_unit_test_dsml_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir)/dataplane/tokenizer
tests_unit_test_dsml_LDADD = $(CHAT_LIBS)

# Held-out evaluation of models/demo on the CPU engine (tool-call rates, DSML-leak rate, greedy
# vs the transformers reference) and the one-shot CLI's load+answer time on it.
check_PROGRAMS += tests/integration/test-demo-eval
TESTS += tests/integration/test-demo-eval tests/integration/test-demo-eval-cli.sh
dist_check_SCRIPTS += tests/integration/test-demo-eval-cli.sh
tests_integration_test_demo_eval_SOURCES = tests/integration/test-demo-eval.c
tests_integration_test_demo_eval_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir)
tests_integration_test_demo_eval_LDADD = libtdmchat.a $(WORKER_ENGINE_LIBS) libtdmtok.a \
	$(COMMON_LIBS)
