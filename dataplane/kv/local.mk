# dataplane/kv — layout descriptor (single source of truth, I6), pool configurator, host KV pool,
# page allocator and sequence page tables.
noinst_LIBRARIES += libtdmkv.a
libtdmkv_a_SOURCES = \
	dataplane/kv/layout.c \
	dataplane/kv/pool.c
libtdmkv_a_CFLAGS = $(AM_CFLAGS) -ffp-contract=off
noinst_HEADERS += include/tdm/kv.h

KV_TESTS = tests/unit/test-kv
check_PROGRAMS += $(KV_TESTS)
TESTS += $(KV_TESTS)
tests_unit_test_kv_SOURCES = tests/unit/test-kv.c
tests_unit_test_kv_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_kv_LDADD = libtdmkv.a $(COMMON_LIBS)
