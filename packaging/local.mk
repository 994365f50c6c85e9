# packaging/ — what `make install` puts beside the binaries for a systemd host (units, polkit
# rule, sysusers/tmpfiles, default configs, man pages generated from each program's --help, the
# demo model), and `make deb`: the Debian packages built with packaging/debian (debhelper 13)
# from this tree's `make dist` tarball, so the package is built from exactly what a clean clone
# distributes. docs/packaging.md describes the layout and the tests.
systemdunitdir = $(prefix)/lib/systemd/system
dist_systemdunit_DATA = packaging/systemd/tandemd.service packaging/systemd/tandem-worker@.service \
	packaging/systemd/tandem.target
tandemconfdir = $(sysconfdir)/tandem
dist_tandemconf_DATA = packaging/tandemd.conf
workersconfdir = $(sysconfdir)/tandem/workers
dist_workersconf_DATA = packaging/workers/demo.conf
polkitrulesdir = $(datadir)/polkit-1/rules.d
dist_polkitrules_DATA = packaging/polkit/tandem.rules
sysusersdir = $(prefix)/lib/sysusers.d
tmpfilesdir = $(prefix)/lib/tmpfiles.d
dist_doc_DATA += README.md
demomodeldir = $(pkgdatadir)/models/demo

# Man pages from the programs' own --help (packaging/gen-man.sh): never out of step with them.
nodist_man_MANS = packaging/tandemd.1 packaging/tandem-worker.1 packaging/tandemctl.1
TDM_GEN_MAN = $(AM_V_GEN)$(MKDIR_P) packaging && \
	$(SHELL) $(srcdir)/packaging/gen-man.sh
packaging/tandemd.1: tandemd$(EXEEXT) $(srcdir)/packaging/gen-man.sh
	$(TDM_GEN_MAN) ./tandemd$(EXEEXT) 1 "tandem control plane" $(VERSION) >$@.tmp && mv $@.tmp $@
packaging/tandem-worker.1: tandem-worker$(EXEEXT) $(srcdir)/packaging/gen-man.sh
	$(TDM_GEN_MAN) ./tandem-worker$(EXEEXT) 1 "tandem serving worker" $(VERSION) >$@.tmp && \
	mv $@.tmp $@
packaging/tandemctl.1: tandemctl$(EXEEXT) $(srcdir)/packaging/gen-man.sh
	$(TDM_GEN_MAN) ./tandemctl$(EXEEXT) 1 "tandem operator command line" $(VERSION) >$@.tmp && \
	mv $@.tmp $@
CLEANFILES += $(nodist_man_MANS)

# The demo model: whatever models/demo holds at build time (EXTRA_DIST ships it in the tarball).
install-data-local:
	$(MKDIR_P) '$(DESTDIR)$(sysusersdir)' '$(DESTDIR)$(tmpfilesdir)' '$(DESTDIR)$(demomodeldir)'
	$(INSTALL_DATA) $(srcdir)/packaging/tandem.sysusers '$(DESTDIR)$(sysusersdir)/tandem.conf'
	$(INSTALL_DATA) $(srcdir)/packaging/tandem.tmpfiles '$(DESTDIR)$(tmpfilesdir)/tandem.conf'
	for f in $(srcdir)/models/demo/*; do \
	  $(INSTALL_DATA) "$$f" '$(DESTDIR)$(demomodeldir)/' || exit 1; done
uninstall-local:
	rm -f '$(DESTDIR)$(sysusersdir)/tandem.conf' '$(DESTDIR)$(tmpfilesdir)/tandem.conf'
	rm -rf '$(DESTDIR)$(demomodeldir)'

PACKAGING_DEBIAN = packaging/debian/control packaging/debian/rules packaging/debian/copyright \
	packaging/debian/source/format packaging/debian/tandem.postinst packaging/debian/tandem.postrm \
	packaging/debian/tandem.lintian-overrides packaging/debian/tandem.install \
	packaging/debian/tandem-cuda.install
EXTRA_DIST += packaging/tandem.sysusers packaging/tandem.tmpfiles packaging/groups.ini \
	packaging/gen-man.sh \
	$(PACKAGING_DEBIAN)

# make deb: dist tarball -> deb/tandem-VERSION/ (+ debian/ and a changelog for VERSION) ->
# dpkg-buildpackage (binary only, unsigned). TDM_DEB_VERSION overrides the package version;
# TDM_DEB_CUDA=1 builds tandem-cuda too (needs nvcc, the CUDA runtime and cuBLAS), otherwise the
# build profile nocuda builds tandem alone.
TDM_DEB_VERSION = $(VERSION)
deb: dist
	rm -rf deb && $(MKDIR_P) deb
	tar -C deb -xzf $(distdir).tar.gz
	cp -R deb/$(distdir)/packaging/debian deb/$(distdir)/debian
	{ printf 'tandem (%s) unstable; urgency=medium\n\n  * Build of tandem %s.\n\n' \
	    '$(TDM_DEB_VERSION)' '$(VERSION)'; \
	  printf ' -- tandem maintainers <tandem@lists.example.org>  %s\n' "$$(date -R)"; \
	} >deb/$(distdir)/debian/changelog
	cd deb/$(distdir) && DEB_BUILD_OPTIONS="parallel=$${TDM_DEB_JOBS:-2} $$DEB_BUILD_OPTIONS" \
	  dpkg-buildpackage -b -us -uc $$(test "$${TDM_DEB_CUDA:-0}" = 1 || echo -Pnocuda)
	@ls -l deb/*.deb
clean-local: tdm-clean-deb
tdm-clean-deb:
	-rm -rf deb
.PHONY: deb tdm-clean-deb

# The units' rules (Type=notify, watchdog, hardening, no hard dependency of workers on tandemd,
# stop timeout above the drain deadline) parsed from packaging/systemd.
TESTS += tests/integration/test-units.sh
dist_check_SCRIPTS += tests/integration/test-units.sh
# The same units under a real systemd (a user manager in a private mount namespace, root only):
# READY, the watchdog restarting a stopped scheduler loop, tandemd restarts leaving workers alone.
TESTS += tests/integration/test-units-systemd.sh
dist_check_SCRIPTS += tests/integration/test-units-systemd.sh

# make deb-check: the package as CI checks it: lintian (any error fails; the warnings and the
# overrides' reasons are printed). systemd-analyze verify needs the binaries at the units' paths
# and the host's targets, so it runs on the installed package (tests/integration/test-deb-install.sh).
deb-check: deb
	lintian --fail-on error --display-info --show-overrides deb/*.changes
.PHONY: deb-check
EXTRA_DIST += tests/integration/deb-lib.sh

# The package on this machine (root; skipped without build/deb, a failure with TDM_DEB_REQUIRED=1):
# install, files, user, conffiles, man pages, the installed worker serving, purge; an upgrade
# N -> N+1 with a database configured.
TESTS += tests/integration/test-deb-install.sh tests/integration/test-deb-upgrade.sh
dist_check_SCRIPTS += tests/integration/test-deb-install.sh tests/integration/test-deb-upgrade.sh
