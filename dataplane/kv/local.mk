# dataplane/kv — layout descriptor (single source of truth, I6), pool configurator, host KV pool,
# page allocator and sequence page tables.
noinst_LIBRARIES += libtdmkv.a
libtdmkv_a_SOURCES = \
	dataplane/kv/layout.c \
	dataplane/kv/pool.c \
	dataplane/kv/gate.c \
	dataplane/kv/hicache.c \
	dataplane/kv/hicache_copy.c
libtdmkv_a_CFLAGS = $(AM_CFLAGS) -ffp-contract=off
noinst_HEADERS += include/tdm/kv.h include/tdm/hicache.h dataplane/kv/hicache_int.h

KV_TESTS = tests/unit/test-kv
check_PROGRAMS += $(KV_TESTS)
TESTS += $(KV_TESTS)
tests_unit_test_kv_SOURCES = tests/unit/test-kv.c
tests_unit_test_kv_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_kv_LDADD = libtdmkv.a $(COMMON_LIBS)

# HiCache: the host tier and the layer gate (layouts, bit-identical loads, checksums, the gate on
# a real forward). The same test built with the gate's wait deleted (-DTDM_TEST_DROP_GATE_WAIT)
# must fail: test-hicache-nogate.sh runs it and asserts the gate test goes red.
HICACHE_TESTS = tests/unit/test-hicache
check_PROGRAMS += $(HICACHE_TESTS) tests/unit/test-hicache-nogate
TESTS += $(HICACHE_TESTS) tests/unit/test-hicache-nogate.sh
dist_check_SCRIPTS += tests/unit/test-hicache-nogate.sh
tests_unit_test_hicache_SOURCES = tests/unit/test-hicache.c
tests_unit_test_hicache_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir)
tests_unit_test_hicache_CFLAGS = $(AM_CFLAGS) -ffp-contract=off
tests_unit_test_hicache_LDADD = libtdmgraph.a libtdmkernels.a libtdmkv.a $(COMMON_LIBS)
tests_unit_test_hicache_nogate_SOURCES = tests/unit/test-hicache.c dataplane/kv/gate.c
tests_unit_test_hicache_nogate_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir) -DTDM_TEST_DROP_GATE_WAIT
tests_unit_test_hicache_nogate_CFLAGS = $(AM_CFLAGS) -ffp-contract=off
tests_unit_test_hicache_nogate_LDADD = libtdmgraph.a libtdmkernels.a libtdmkv.a $(COMMON_LIBS)
