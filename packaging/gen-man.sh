#!/bin/sh
# gen-man.sh PROGRAM SECTION SUMMARY [VERSION] — a man page on stdout, generated from the built
# program's own --help (for tandemd and tandem-worker that text is printed from their parameter
# tables, common/params.c), so the page cannot drift from the binary it ships with. tandemctl's
# usage lines (and `tandemctl plan`'s) become its SYNOPSIS.
set -eu
prog=$1 section=$2 summary=$3 version=${4:-}
name=$(basename "$prog")
help=$(mktemp)
trap 'rm -f "$help"' EXIT
if [ "$name" = tandemctl ]; then
    { "$prog" --help 2>&1 || true; "$prog" plan 2>&1 || true; } >"$help"
else
    "$prog" --help >"$help"
fi
# roff: a leading dot or quote would start a request; backslashes are escapes.
esc() { sed -e 's/\\/\\e/g' -e 's/^\([.'"'"']\)/\\\&\1/' -e 's/-/\\-/g'; }
printf '.TH %s %s "" "tandem %s" "tandem"\n' "$(echo "$name" | tr a-z A-Z)" "$section" "$version"
printf '.SH NAME\n%s \\- %s\n' "$name" "$summary"
if [ "$name" = tandemctl ]; then
    printf '.SH SYNOPSIS\n.nf\n'
    sed -e 's/^usage: *//' -e 's/^ *//' "$help" | esc
    printf '.fi\n'
else
    printf '.SH SYNOPSIS\n.B %s\n[\\fIOPTIONS\\fR]\n.SH OPTIONS\n' "$name"
    printf 'Every option is also an environment variable (shown after each) and an INI key of a\n'
    printf '\\fB\\-\\-config\\fR file. Precedence: command line > environment > \\fB\\-\\-override\\-config\\fR > \\fB\\-\\-config\\fR > default.\n'
    # "  --flag ARG" starts an entry; the indented line under it is its text.
    grep -v '^Usage:' "$help" | esc | awk '
        /^  \\-\\-/ { sub(/^ +/, ""); n = index($0, " ");
                      if (n) printf ".TP\n\\fB%s\\fR %s\n", substr($0, 1, n - 1), substr($0, n + 1);
                      else printf ".TP\n\\fB%s\\fR\n", $0; next }
        /^ +/ { sub(/^ +/, ""); print; next }
        NF { print }'
fi
case $name in
tandemd) files='/etc/tandem/tandemd.conf (INI, section [tandemd]); /var/lib/tandem (state: tokens, groups, the private PostgreSQL cluster when no DSN is set); tandemd.service' ;;
tandem-worker) files='/etc/tandem/workers/NAME.conf (INI, section [worker], one per group); /var/lib/tandem/groups/NAME/override.ini (written by tandemd on reconfigure); tandem-worker@NAME.service' ;;
*) files='/var/lib/tandem/admin.token (the default token file)' ;;
esac
printf '.SH FILES\n'
printf '%s\n' "$files" | esc
printf '.SH SEE ALSO\n'
for p in tandemd tandem-worker tandemctl; do
    [ "$p" = "$name" ] || printf '.BR %s (1),\n' "$(echo "$p" | esc)"
done
printf '.BR systemctl (1)\n.PP\n/usr/share/doc/tandem/README.md\n'
