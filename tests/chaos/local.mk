# tests/chaos/local.mk — the chaos suite (tests/chaos/chaos.py; docs/design.md §5): the whole
# system (private PostgreSQL, tandemd with its supervisor and policy auto, a prefill and a decode
# group at TP=2 on CPU) under a seeded streaming load, one fault at a time through tandemd's
# audited fault route. `make check` runs the short version (3x the latency targets);
# `make chaos` the long one (use a build without sanitizers), writing bench/results/chaos.json.
EXTRA_DIST += tests/chaos/chaos.py tests/chaos/chaoslib.py tests/chaos/chaos.sh
dist_check_SCRIPTS += tests/chaos/test-chaos.sh
TESTS += tests/chaos/test-chaos.sh
chaos: tandem-worker tandemd tdm-pg
	$(SHELL) $(top_srcdir)/tests/chaos/chaos.sh '$(abs_top_builddir)' '$(abs_top_srcdir)'
.PHONY: chaos
