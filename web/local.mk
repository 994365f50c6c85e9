# web/ — the operator console: static HTML/JS/CSS compiled into tandemd (web/embed.sh) and served
# at /console by controlplane/console.c.
WEB_ASSETS = web/console.html web/console.js web/console.css
EXTRA_DIST += $(WEB_ASSETS) web/embed.sh
web/assets.c: $(addprefix $(top_srcdir)/,$(WEB_ASSETS)) $(top_srcdir)/web/embed.sh
	@$(MKDIR_P) web
	$(AM_V_GEN)$(SHELL) $(top_srcdir)/web/embed.sh $@ $(addprefix $(top_srcdir)/,$(WEB_ASSETS))
CLEANFILES += web/assets.c

# Browser test: headless Chromium renders the console against a real tandemd.
TESTS += tests/browser/test-console.sh
dist_check_SCRIPTS += tests/browser/test-console.sh
