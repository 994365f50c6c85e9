# dataplane/model — the forward graph (Llama/Qwen2 over the paged KV cache) on the kernel backend.
noinst_LIBRARIES += libtdmgraph.a
libtdmgraph_a_SOURCES = \
	dataplane/model/graph.c \
	dataplane/model/forward.c
libtdmgraph_a_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)
libtdmgraph_a_CFLAGS = $(AM_CFLAGS) -ffp-contract=off
noinst_HEADERS += dataplane/model/graph.h dataplane/model/graph_int.h
GRAPH_LIBS = libtdmgraph.a libtdmkernels.a libtdmkv.a $(COMMON_LIBS)

GRAPH_TESTS = tests/unit/test-forward
check_PROGRAMS += $(GRAPH_TESTS)
TESTS += $(GRAPH_TESTS)
tests_unit_test_forward_SOURCES = tests/unit/test-forward.c tests/unit/forward-testutil.h
tests_unit_test_forward_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir) -I$(top_srcdir)/dataplane/model
tests_unit_test_forward_CFLAGS = $(AM_CFLAGS) -ffp-contract=off
tests_unit_test_forward_LDADD = $(GRAPH_LIBS)

# The fixture checkpoints through the loader (libtdmmodel) against the transformers goldens.
GRAPH_TESTS_GOLDEN = tests/unit/test-forward-golden
check_PROGRAMS += $(GRAPH_TESTS_GOLDEN)
TESTS += $(GRAPH_TESTS_GOLDEN)
tests_unit_test_forward_golden_SOURCES = tests/unit/test-forward-golden.c
tests_unit_test_forward_golden_CPPFLAGS = $(TEST_CPPFLAGS) -I$(top_srcdir) \
	-I$(top_srcdir)/dataplane/model
tests_unit_test_forward_golden_CFLAGS = $(AM_CFLAGS) -ffp-contract=off
tests_unit_test_forward_golden_LDADD = libtdmgraph.a libtdmkernels.a libtdmkv.a libtdmmodel.a \
	$(COMMON_LIBS)
