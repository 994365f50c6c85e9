# packaging/ — systemd units, sysusers/tmpfiles and default config installed with the binaries.
systemdunitdir = $(prefix)/lib/systemd/system
dist_systemdunit_DATA = packaging/systemd/tandemd.service packaging/systemd/tandem-worker@.service
tandemconfdir = $(sysconfdir)/tandem
dist_tandemconf_DATA = packaging/tandemd.conf
sysusersdir = $(prefix)/lib/sysusers.d
tmpfilesdir = $(prefix)/lib/tmpfiles.d
install-data-local:
	$(MKDIR_P) '$(DESTDIR)$(sysusersdir)' '$(DESTDIR)$(tmpfilesdir)'
	$(INSTALL_DATA) $(srcdir)/packaging/tandem.sysusers '$(DESTDIR)$(sysusersdir)/tandem.conf'
	$(INSTALL_DATA) $(srcdir)/packaging/tandem.tmpfiles '$(DESTDIR)$(tmpfilesdir)/tandem.conf'
uninstall-local:
	rm -f '$(DESTDIR)$(sysusersdir)/tandem.conf' '$(DESTDIR)$(tmpfilesdir)/tandem.conf'
EXTRA_DIST += packaging/tandem.sysusers packaging/tandem.tmpfiles packaging/groups.ini
