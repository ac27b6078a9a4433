#!/usr/bin/env bash
# Install Julia from Debian 11 ("bullseye"), the Debian release that packages
# it (Julia 1.5.3), on a newer Debian: a separate source entry for
# `bullseye main` on the same archive this machine already uses, pinned low
# so apt takes nothing else from it. Idempotent; run as root.
set -euo pipefail

SOURCE=/etc/apt/sources.list.d/monarch-julia-bullseye.sources
PIN=/etc/apt/preferences.d/monarch-julia-bullseye

fail() {
    echo "install-julia.sh: cannot install Julia: $*" >&2
    echo "install-julia.sh: install Julia >= 1.5 yourself and put 'julia' on PATH" >&2
    exit 1
}

if command -v julia >/dev/null 2>&1; then
    exit 0
fi
[ "$(id -u)" = 0 ] || fail "not root (apt-get needs root)"
command -v apt-get >/dev/null 2>&1 || fail "no apt-get (this script knows Debian only)"

# The archive address of the machine's own Debian source entry (the main
# archive, not the security one): deb822 `URIs:` lines first, then the
# one-line `deb URI SUITE ...` format.
archive_uri() {
    local f uri
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] && [ "$f" != "$SOURCE" ] || continue
        uri=$(awk '/^URIs:/ { for (i = 2; i <= NF; i++) print $i }' "$f" | grep -v -- '-security' | grep '/debian/\?$' | head -n1 || true)
        [ -n "$uri" ] && { echo "$uri"; return; }
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        uri=$(awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i !~ /^\[/ && $i !~ /\]$/) { print $i; break } }' "$f" |
            grep -v -- '-security' | grep '/debian/\?$' | head -n1 || true)
        [ -n "$uri" ] && { echo "$uri"; return; }
    done
}

URI=$(archive_uri)
[ -n "$URI" ] || fail "no Debian archive address found in /etc/apt/sources.list{,.d}"
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
[ -f "$KEYRING" ] || fail "$KEYRING is missing (package debian-archive-keyring)"

cat > "$SOURCE.tmp" <<SRC
# Debian 11 (bullseye), for the julia package only (pinned low in $PIN).
Types: deb
URIs: $URI
Suites: bullseye
Components: main
Signed-By: $KEYRING
SRC
mv "$SOURCE.tmp" "$SOURCE"

cat > "$PIN.tmp" <<PREF
# Take nothing from bullseye unless the machine's own releases lack it.
Package: *
Pin: release n=bullseye
Pin-Priority: 100
PREF
mv "$PIN.tmp" "$PIN"

APT=(apt-get -o DPkg::Lock::Timeout=600 -q)
"${APT[@]}" update >/dev/null || fail "apt-get update failed (is the archive $URI reachable?)"
DEBIAN_FRONTEND=noninteractive "${APT[@]}" install -y --no-install-recommends julia >/dev/null ||
    fail "apt-get install julia from bullseye failed"
command -v julia >/dev/null 2>&1 || fail "julia is still not on PATH after installing"
echo "install-julia.sh: $(julia --version)"
