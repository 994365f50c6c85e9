# sql/ — forward-only migrations NNNN_name.sql, compiled into tandemd (sql/embed.sh) and checked
# against sql/expected/schema.out by tests/integration/test-cp-migrate.sh.
SQL_MIGRATIONS = \
	sql/0001_init.sql \
	sql/0002_sample_stats.sql
EXTRA_DIST += $(SQL_MIGRATIONS) sql/embed.sh sql/schema.sql sql/expected/schema.out
sql/migrations.c: $(SQL_MIGRATIONS) $(top_srcdir)/sql/embed.sh
	@mkdir -p sql
	$(AM_V_GEN)$(SHELL) $(top_srcdir)/sql/embed.sh $@ $(addprefix $(top_srcdir)/,$(SQL_MIGRATIONS))
CLEANFILES += sql/migrations.c
