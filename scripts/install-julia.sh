#!/usr/bin/env bash
# Install Julia from Debian 11 ("bullseye"), the Debian release that packages
# it (Julia 1.5.3), on a newer Debian: a separate source entry for
# `bullseye main` on the same archive this machine already uses, pinned low
# so apt takes nothing else from it. Julia 1.5.3 unwinds exceptions with
# the libunwind it was built with (bullseye's 1.3); the newer system one
# crashes it, so bullseye's libunwind8 is unpacked into $UNWIND_DIR and a
# wrapper $WRAPPER puts it on the library path. Idempotent; run as root.
set -euo pipefail

SOURCE=/etc/apt/sources.list.d/monarch-julia-bullseye.sources
PIN=/etc/apt/preferences.d/monarch-julia-bullseye

fail() {
    echo "install-julia.sh: cannot install Julia: $*" >&2
    echo "install-julia.sh: install Julia >= 1.5 yourself and put 'julia' on PATH" >&2
    exit 1
}

UNWIND_DIR=/usr/local/lib/monarch-julia
WRAPPER=/usr/local/bin/julia

# Whether `$1` runs Julia and survives a thrown and caught exception.
julia_works() {
    "$1" --startup-file=no -e 'f() = error("x"); try f() catch; end; print("ok")' 2>/dev/null | grep -qx ok
}

if command -v julia >/dev/null 2>&1 && julia_works julia; then
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
[ -x /usr/bin/julia ] || fail "/usr/bin/julia is missing after installing"

if ! julia_works /usr/bin/julia; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    (cd "$tmp" && "${APT[@]}" download libunwind8/bullseye >/dev/null 2>&1) ||
        fail "apt-get download libunwind8/bullseye failed"
    dpkg-deb -x "$tmp"/libunwind8_*.deb "$tmp/root" || fail "cannot unpack libunwind8"
    mkdir -p "$UNWIND_DIR"
    cp -a "$tmp"/root/usr/lib/x86_64-linux-gnu/libunwind*.so* "$UNWIND_DIR"/ || fail "cannot copy libunwind"
    cat > "$WRAPPER.tmp" <<WRAP
#!/bin/sh
# Julia 1.5.3 from Debian bullseye with the libunwind it was built with
# (written by libmonarch's scripts/install-julia.sh).
LD_LIBRARY_PATH=$UNWIND_DIR\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
export LD_LIBRARY_PATH
exec /usr/bin/julia "\$@"
WRAP
    chmod 755 "$WRAPPER.tmp"
    mv "$WRAPPER.tmp" "$WRAPPER"
    julia_works "$WRAPPER" || fail "julia crashes on exceptions even with bullseye's libunwind"
fi
hash -r
command -v julia >/dev/null 2>&1 && julia_works julia || fail "julia on PATH does not work (is /usr/local/bin on PATH?)"
echo "install-julia.sh: $(julia --version)"
