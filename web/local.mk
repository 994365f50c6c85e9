# web/ — the operator console: static HTML/JS/CSS compiled into tandemd (web/embed.sh) and served
# at /console by controlplane/http/console.c, with uPlot (web/uplot.pin, installed by
# tools/install-deps.sh, never committed) and the alerts runbook the alert view quotes.
WEB_ASSETS = web/console.html web/console.js web/console-views.js web/console.css
WEB_EXTRA = $(UPLOT_DIR)/dist/uPlot.iife.min.js $(UPLOT_DIR)/dist/uPlot.min.css web/uPlot.LICENSE \
	$(top_srcdir)/docs/alerts.md
EXTRA_DIST += $(WEB_ASSETS) web/embed.sh web/uplot.pin docs/alerts.md
web/uPlot.LICENSE: $(UPLOT_DIR)/LICENSE
	@$(MKDIR_P) web
	$(AM_V_GEN)cp $(UPLOT_DIR)/LICENSE $@
web/assets.c: $(addprefix $(top_srcdir)/,$(WEB_ASSETS)) $(WEB_EXTRA) $(top_srcdir)/web/embed.sh
	@$(MKDIR_P) web
	$(AM_V_GEN)$(SHELL) $(top_srcdir)/web/embed.sh $@ $(addprefix $(top_srcdir)/,$(WEB_ASSETS)) $(WEB_EXTRA)
CLEANFILES += web/assets.c web/uPlot.LICENSE
# uPlot's licence ships with the package (its code is inside tandemd)
nodist_doc_DATA = web/uPlot.LICENSE

# Browser test: headless Chromium, driven through WebDriver (tests/browser/console.mjs), renders
# the console against a real tandemd, PostgreSQL and CPU workers.
TESTS += tests/browser/test-console.sh
dist_check_SCRIPTS += tests/browser/test-console.sh
EXTRA_DIST += tests/browser/console.mjs tests/browser/package.json tests/browser/package-lock.json
