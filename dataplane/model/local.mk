# dataplane/model — checkpoint loading: config.json, safetensors (mmap), weight views, TP shards,
# bf16/f16 conversions. The forward pass lives in graph.mk.
noinst_LIBRARIES += libtdmmodel.a
libtdmmodel_a_SOURCES = \
	dataplane/model/config.c \
	dataplane/model/safetensors.c \
	dataplane/model/loader.c \
	dataplane/model/shard.c \
	dataplane/model/dtype.c
noinst_HEADERS += include/tdm/model.h dataplane/model/model_int.h
MODEL_LIBS = libtdmmodel.a $(COMMON_LIBS)

MODEL_TESTS = \
	tests/unit/test-model-dtype \
	tests/unit/test-model-config \
	tests/unit/test-model-safetensors \
	tests/unit/test-model-loader \
	tests/unit/test-model-fixtures
check_PROGRAMS += $(MODEL_TESTS)
TESTS += $(MODEL_TESTS)

tests_unit_test_model_dtype_SOURCES = tests/unit/test-model-dtype.c
tests_unit_test_model_dtype_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir)/dataplane/model
tests_unit_test_model_dtype_LDADD = $(MODEL_LIBS)
tests_unit_test_model_config_SOURCES = tests/unit/test-model-config.c
tests_unit_test_model_config_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir)/dataplane/model
tests_unit_test_model_config_LDADD = $(MODEL_LIBS)
tests_unit_test_model_safetensors_SOURCES = tests/unit/test-model-safetensors.c \
	tests/unit/model-testutil.h
tests_unit_test_model_safetensors_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir)/dataplane/model
tests_unit_test_model_safetensors_LDADD = $(MODEL_LIBS)
tests_unit_test_model_loader_SOURCES = tests/unit/test-model-loader.c tests/unit/model-testutil.h
tests_unit_test_model_loader_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir)/dataplane/model
tests_unit_test_model_loader_LDADD = $(MODEL_LIBS)
tests_unit_test_model_fixtures_SOURCES = tests/unit/test-model-fixtures.c
tests_unit_test_model_fixtures_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir)/dataplane/model
tests_unit_test_model_fixtures_LDADD = $(MODEL_LIBS)

# safetensors header parser: corpus replay in `make check`, libFuzzer binary in `make fuzz`
check_PROGRAMS += tests/fuzz/replay-safetensors
TESTS += tests/fuzz/replay-safetensors
tests_fuzz_replay_safetensors_SOURCES = tests/fuzz/fuzz-safetensors.c tests/fuzz/replay.c
tests_fuzz_replay_safetensors_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir)/dataplane/model
tests_fuzz_replay_safetensors_LDADD = $(MODEL_LIBS)
FUZZ_BINS += fuzz/fuzz-safetensors
fuzz/fuzz-safetensors: $(top_srcdir)/tests/fuzz/fuzz-safetensors.c \
		$(top_srcdir)/dataplane/model/safetensors.c \
		$(top_srcdir)/common/mem.c $(top_srcdir)/common/log.c $(top_srcdir)/common/status.c
	$(TDM_FUZZ_LINK) -I$(top_srcdir)/dataplane/model $^ $(JANSSON_LIBS) -lm
