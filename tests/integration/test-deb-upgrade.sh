#!/bin/sh
# test-deb-upgrade.sh — an upgrade as an operator does it: install version N with a database
# configured (TDM_PG_DSN in /etc/default/tandemd, the test cluster make check runs), so postinst
# runs `tandemd --migrate`; edit a conffile; install N+1 (the same package with its version
# raised, repacked with dpkg-deb: what changes between N and N+1 here is what dpkg and the
# maintainer scripts see); then the edit is kept (no .dpkg-* copies), the migrations were applied
# once (schema_migrations unchanged by N+1's postinst, which reports "schema version K -> K"), and
# postinst run again by hand changes nothing. (test-deb-install.sh checks that without a DSN
# postinst migrates nothing.)
#
# Needs root, the package and the test PostgreSQL (TDM_TEST_PG*); deb-lib.sh says what happens
# without them. The package, the database and /etc/default/tandemd are removed at exit.
set -u
SRC=${TDM_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
. "$SRC/tests/integration/deb-lib.sh"
if [ -z "${TDM_TEST_PGHOST:-}" ] || [ -z "${TDM_TEST_PGPORT:-}" ] || [ -z "${TDM_TEST_PGUSER:-}" ]; then
    deb_skip_or_fail "no test PostgreSQL (TDM_TEST_PGHOST/PORT/USER unset; run under make check)"
fi
deb_setup
[ -e /etc/default/tandemd ] && deb_skip_or_fail "/etc/default/tandemd exists: this test would replace it"
db=test_deb_upgrade
psql_() { psql -X -q -v ON_ERROR_STOP=1 -h "$TDM_TEST_PGHOST" -p "$TDM_TEST_PGPORT" -U "$TDM_TEST_PGUSER" "$@"; }
DEB_CLEANUP_EXTRA='rm -f /etc/default/tandemd; psql_ -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1'
psql_ -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db" >/dev/null 2>"$TMP/err"
okf $? "fresh database $db" "$TMP/err"

# N+1: the package's control file with the version raised (+1 appended to the Debian revision
# space: VERSION -> VERSION.1, which dpkg orders after VERSION).
NEXT=$DEB_VERSION.1
mkdir -p "$TMP/next"
dpkg-deb -R "$DEB" "$TMP/next/root" &&
    sed -i "s/^Version: .*/Version: $NEXT/" "$TMP/next/root/DEBIAN/control" &&
    dpkg-deb --root-owner-group -Zgzip -b "$TMP/next/root" "$TMP/next/tandem_${NEXT}_$(dpkg-deb -f "$DEB" Architecture).deb" >/dev/null 2>"$TMP/err"
okf $? "version N+1 ($NEXT) built from N" "$TMP/err"
DEB_NEXT=$(ls "$TMP"/next/tandem_*.deb 2>/dev/null)
dpkg --compare-versions "$NEXT" gt "$DEB_VERSION"; ok $? "dpkg orders $NEXT after $DEB_VERSION"

# N with TDM_PG_DSN in /etc/default/tandemd (what tandemd.service reads too)
dsn="host=$TDM_TEST_PGHOST port=$TDM_TEST_PGPORT user=$TDM_TEST_PGUSER dbname=$db"
printf '# written by test-deb-upgrade.sh\nTDM_PG_DSN="%s"\n' "$dsn" >/etc/default/tandemd
deb_apt install "$DEB" >"$TMP/install1.log" 2>&1
okf $? "install N ($DEB_VERSION) with a DSN" "$TMP/install1.log"
grep -q 'schema version 0 -> [1-9]' "$TMP/install1.log"; okf $? "N's postinst applied the migrations" "$TMP/install1.log"
mig() { psql_ -d "$db" -At -c "SELECT version, name, applied_us FROM schema_migrations ORDER BY version" 2>&1; }
m1=$(mig)
n1=$(echo "$m1" | grep -c .)
[ "$n1" -ge 1 ]; ok $? "schema_migrations holds $n1 rows"

# the operator's edit of a conffile
printf 'listen = 127.0.0.1:18470\n' >>/etc/tandem/tandemd.conf
sum=$(md5sum /etc/tandem/tandemd.conf)

deb_apt install "$DEB_NEXT" >"$TMP/install2.log" 2>&1
okf $? "upgrade to N+1 ($NEXT)" "$TMP/install2.log"
[ "$(dpkg-query -W -f='${Version}' tandem)" = "$NEXT" ]; ok $? "dpkg: tandem $NEXT installed"
[ "$(md5sum /etc/tandem/tandemd.conf)" = "$sum" ]; ok $? "the conffile edit is kept"
left=$(ls /etc/tandem/*.dpkg-* /etc/tandem/workers/*.dpkg-* 2>/dev/null)
[ -z "$left" ]; ok $? "no .dpkg-new/.dpkg-dist/.dpkg-old beside the conffiles${left:+: $left}"
grep -Eq 'schema version ([1-9][0-9]*) -> \1([^0-9]|$)' "$TMP/install2.log"
okf $? "N+1's postinst: migrate found nothing to apply" "$TMP/install2.log"
[ "$(mig)" = "$m1" ]; ok $? "schema_migrations unchanged by the upgrade (each migration applied once)"

# postinst idempotent: run again as dpkg would (configure, the version just configured)
st1=$(stat -c '%a %U:%G' /var/lib/tandem /var/lib/tandem/groups /var/lib/tandem/spool)
pw1=$(getent passwd tandem)
/var/lib/dpkg/info/tandem.postinst configure "$NEXT" >"$TMP/again.log" 2>&1
okf $? "postinst configure run again" "$TMP/again.log"
/var/lib/dpkg/info/tandem.postinst configure "$NEXT" >>"$TMP/again.log" 2>&1
okf $? "postinst configure run a third time" "$TMP/again.log"
[ "$(mig)" = "$m1" ]; ok $? "schema_migrations unchanged by the reruns"
[ "$(stat -c '%a %U:%G' /var/lib/tandem /var/lib/tandem/groups /var/lib/tandem/spool)" = "$st1" ] &&
    [ "$(getent passwd tandem)" = "$pw1" ]
ok $? "state dirs and the tandem user unchanged by the reruns"
[ "$(md5sum /etc/tandem/tandemd.conf)" = "$sum" ]; ok $? "the conffile edit survives the reruns"
tap_done
