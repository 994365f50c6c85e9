# common/ — small and boring shared code: status, log, params, arena, json, time, hashing.
noinst_LIBRARIES += libtdmcommon.a
libtdmcommon_a_SOURCES = \
	common/status.c \
	common/log.c \
	common/mem.c \
	common/arena.c \
	common/time.c \
	common/ini.c \
	common/params.c \
	common/params_worker.c \
	common/params_tandemd.c \
	common/params_doc.c \
	common/json.c \
	common/layout.c \
	common/telemetry.c \
	common/telemetry_scan.c \
	common/telemetry_scan_batch.c \
	common/hash.c \
	common/httpc.c \
	common/prom.c \
	common/u64map.c \
	common/mapfile.c \
	common/net.c
noinst_HEADERS += \
	include/tdm/status.h \
	include/tdm/log.h \
	include/tdm/mem.h \
	include/tdm/arena.h \
	include/tdm/time.h \
	include/tdm/layout.h \
	include/tdm/params.h \
	include/tdm/config.h \
	include/tdm/json.h \
	include/tdm/telemetry.h \
	common/telemetry_int.h \
	include/tdm/hash.h \
	include/tdm/httpc.h \
	include/tdm/prom.h \
	include/tdm/u64map.h \
	include/tdm/mapfile.h \
	include/tdm/net.h

# The h2o server scaffold of both daemons (tdm/httpd.h); in COMMON_LIBS, pulled in by the
# programs that serve HTTP (they link $(H2O_LIBS)).
noinst_LIBRARIES += libtdmhttpd.a
libtdmhttpd_a_SOURCES = common/httpd.c
libtdmhttpd_a_CPPFLAGS = $(AM_CPPFLAGS) $(H2O_CFLAGS)
noinst_HEADERS += include/tdm/httpd.h

# docs/params.md is generated from include/tdm/config.h; test-params fails when it is stale.
noinst_PROGRAMS += tools/gen-params-doc
tools_gen_params_doc_SOURCES = tools/gen-params-doc.c
tools_gen_params_doc_LDADD = $(COMMON_LIBS)
dist_doc_DATA += docs/params.md
params-doc: tools/gen-params-doc$(EXEEXT)
	./tools/gen-params-doc$(EXEEXT) $(top_srcdir)/docs/params.md
.PHONY: params-doc

# Unit tests of common/ (tests/unit/test-<module>.c).
COMMON_UNIT_TESTS = \
	tests/unit/test-log \
	tests/unit/test-mem \
	tests/unit/test-arena \
	tests/unit/test-params \
	tests/unit/test-json \
	tests/unit/test-layout \
	tests/unit/test-telemetry \
	tests/unit/test-telemetry-diff \
	tests/unit/test-hash \
	tests/unit/test-prom \
	tests/unit/test-u64map
check_PROGRAMS += $(COMMON_UNIT_TESTS)
TESTS += $(COMMON_UNIT_TESTS)
tests_unit_test_params_SOURCES = tests/unit/test-params.c
tests_unit_test_params_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_params_LDADD = $(COMMON_LIBS)
include common/pg.mk
tests_unit_test_json_SOURCES = tests/unit/test-json.c
tests_unit_test_json_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_json_LDADD = $(COMMON_LIBS)
tests_unit_test_layout_SOURCES = tests/unit/test-layout.c
tests_unit_test_layout_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_layout_LDADD = $(COMMON_LIBS)
tests_unit_test_telemetry_SOURCES = tests/unit/test-telemetry.c
tests_unit_test_telemetry_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_telemetry_LDADD = $(COMMON_LIBS)
# The telemetry decoders (single-pass scanner vs jansson) on arbitrary bytes: corpus replay in
# `make check`, libFuzzer binary in `make fuzz` (tests/fuzz/README.md).
check_PROGRAMS += tests/fuzz/replay-telemetry
TESTS += tests/fuzz/replay-telemetry
tests_fuzz_replay_telemetry_SOURCES = tests/fuzz/fuzz-telemetry.c tests/fuzz/replay.c
tests_fuzz_replay_telemetry_CPPFLAGS = $(TEST_CPPFLAGS)
tests_fuzz_replay_telemetry_LDADD = $(COMMON_LIBS)
FUZZ_BINS += fuzz/fuzz-telemetry
fuzz/fuzz-telemetry: $(top_srcdir)/tests/fuzz/fuzz-telemetry.c $(top_srcdir)/common/telemetry.c $(top_srcdir)/common/telemetry_scan.c \
	$(top_srcdir)/common/telemetry_scan_batch.c $(top_srcdir)/common/json.c $(top_srcdir)/common/mem.c $(top_srcdir)/common/log.c $(top_srcdir)/common/status.c
	$(TDM_FUZZ_LINK) $^ $(JANSSON_LIBS) -lm
tests_unit_test_telemetry_diff_SOURCES = tests/unit/test-telemetry-diff.c
tests_unit_test_telemetry_diff_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_telemetry_diff_LDADD = $(COMMON_LIBS)
tests_unit_test_hash_SOURCES = tests/unit/test-hash.c
tests_unit_test_hash_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_hash_LDADD = $(COMMON_LIBS)
tests_unit_test_prom_SOURCES = tests/unit/test-prom.c
tests_unit_test_prom_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_prom_LDADD = $(COMMON_LIBS)
tests_unit_test_u64map_SOURCES = tests/unit/test-u64map.c
tests_unit_test_u64map_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_u64map_LDADD = $(COMMON_LIBS)
tests_unit_test_log_SOURCES = tests/unit/test-log.c
tests_unit_test_log_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_log_LDADD = $(COMMON_LIBS)
tests_unit_test_mem_SOURCES = tests/unit/test-mem.c
tests_unit_test_mem_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_mem_LDADD = $(COMMON_LIBS)
tests_unit_test_arena_SOURCES = tests/unit/test-arena.c
tests_unit_test_arena_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_arena_LDADD = $(COMMON_LIBS)
