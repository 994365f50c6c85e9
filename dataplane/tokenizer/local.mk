# dataplane/tokenizer — tokenizer.json BPE (byte-level, metaspace + byte-fallback).
noinst_LIBRARIES += libtdmtok.a
libtdmtok_a_SOURCES = \
	dataplane/tokenizer/load.c \
	dataplane/tokenizer/load_steps.c \
	dataplane/tokenizer/encode.c \
	dataplane/tokenizer/pretok.c \
	dataplane/tokenizer/decode.c \
	dataplane/tokenizer/map.c \
	dataplane/tokenizer/unicode.c
noinst_HEADERS += \
	include/tdm/tokenizer.h \
	dataplane/tokenizer/tok_int.h \
	dataplane/tokenizer/load_int.h \
	dataplane/tokenizer/unicode_tables.h
EXTRA_DIST += tools/gen-unicode-tables.py

TOK_LIBS = libtdmtok.a $(COMMON_LIBS)

check_PROGRAMS += tests/unit/test-tokenizer tests/unit/test-tokenizer-golden
TESTS += tests/unit/test-tokenizer tests/unit/test-tokenizer-golden
tests_unit_test_tokenizer_SOURCES = tests/unit/test-tokenizer.c
tests_unit_test_tokenizer_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir)/dataplane/tokenizer
tests_unit_test_tokenizer_LDADD = $(TOK_LIBS)
tests_unit_test_tokenizer_golden_SOURCES = tests/unit/test-tokenizer-golden.c
tests_unit_test_tokenizer_golden_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_tokenizer_golden_LDADD = $(TOK_LIBS)

check_PROGRAMS += tests/fuzz/replay-tokenizer
TESTS += tests/fuzz/replay-tokenizer
tests_fuzz_replay_tokenizer_SOURCES = tests/fuzz/fuzz-tokenizer.c tests/fuzz/replay.c
tests_fuzz_replay_tokenizer_CPPFLAGS = $(TEST_CPPFLAGS)
tests_fuzz_replay_tokenizer_LDADD = $(TOK_LIBS)
FUZZ_BINS += fuzz/fuzz-tokenizer
TOK_FUZZ_SRCS = \
	$(top_srcdir)/tests/fuzz/fuzz-tokenizer.c \
	$(top_srcdir)/dataplane/tokenizer/load.c \
	$(top_srcdir)/dataplane/tokenizer/load_steps.c \
	$(top_srcdir)/dataplane/tokenizer/encode.c \
	$(top_srcdir)/dataplane/tokenizer/pretok.c \
	$(top_srcdir)/dataplane/tokenizer/decode.c \
	$(top_srcdir)/dataplane/tokenizer/map.c \
	$(top_srcdir)/dataplane/tokenizer/unicode.c \
	$(top_srcdir)/common/mem.c \
	$(top_srcdir)/common/arena.c \
	$(top_srcdir)/common/log.c \
	$(top_srcdir)/common/status.c
fuzz/fuzz-tokenizer: $(TOK_FUZZ_SRCS)
	$(TDM_FUZZ_LINK) -I$(top_srcdir)/dataplane/tokenizer $(XXHASH_CFLAGS) $(TOK_FUZZ_SRCS) \
		$(JANSSON_LIBS) $(XXHASH_LIBS) -lm
include dataplane/tokenizer/chat.mk
