#!/usr/bin/env bash
# The user's install paths, tried outside the repository (`make test-install`,
# part of `make test`):
#
#  1. Python: build the sdist, then the wheel from the sdist with build
#     isolation (as `pip install libmonarch-*.tar.gz` does); check the sdist
#     holds every tracked file the build needs; `auditwheel show` and the
#     manylinux tag it allows; install the wheel into a fresh venv and run
#     examples/python/hello_mesh.py and `monarch --help` from a directory
#     outside the repository, with only the venv's bin on PATH.
#  2. C/C++: `make install PREFIX=<tmp>`; build and run a C program with
#     `pkg-config --cflags --libs monarch` and a C++ one with
#     `find_package(Monarch 0.1)`; `find_package(Monarch 0.2)` must fail;
#     the SONAME and the versioned symlinks (readelf, readlink).
#
# Everything goes to a temporary directory removed at exit; cargo reuses
# the repository's target/ (CARGO_TARGET_DIR) so nothing compiles twice.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
VPY="$ROOT/.venv/bin/python"
CMAKE="$ROOT/.venv/bin/cmake"
PYTHON=${PYTHON:-python3}
VERSION=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"$/\1/p' Cargo.toml)
MAJOR=${VERSION%%.*}
WORK=$(mktemp -d /tmp/monarch-test-install.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
start=$SECONDS

fail() {
    echo "test-install: $*" >&2
    exit 1
}
step() { echo "test-install: $*"; }

# ---------------------------------------------------------------- Python
step "sdist, then the wheel built from it (build isolation)"
CARGO_TARGET_DIR="$ROOT/target" "$VPY" -m build --outdir "$WORK/dist" . >"$WORK/build.log" 2>&1 ||
    { tail -40 "$WORK/build.log" >&2; fail "python -m build failed"; }
sdist="$WORK/dist/libmonarch-$VERSION.tar.gz"
[[ -f $sdist ]] || fail "no $sdist"
wheels=("$WORK"/dist/libmonarch-"$VERSION"-*.whl)
[[ ${#wheels[@]} -eq 1 && -f ${wheels[0]} ]] || fail "expected one wheel in $WORK/dist"
wheel=${wheels[0]}

step "the sdist holds every tracked file the build needs"
tar tzf "$sdist" | sed "s|^libmonarch-$VERSION/||" | sort >"$WORK/sdist.lst"
git ls-files -- Cargo.toml Cargo.lock LICENSE README.md pyproject.toml setup.py MANIFEST.in \
    core rdma tensor ffi cli include/monarch.h bindings/python/monarch | sort >"$WORK/needed.lst"
missing=$(comm -23 "$WORK/needed.lst" "$WORK/sdist.lst")
[[ -z $missing ]] || fail "the sdist lacks tracked files: $missing"

step "auditwheel show"
"$VPY" -m auditwheel show "$wheel" >"$WORK/auditwheel.txt" 2>&1 || { cat "$WORK/auditwheel.txt" >&2; fail "auditwheel show failed"; }
plat=$(tr '\n' ' ' <"$WORK/auditwheel.txt" | sed -n 's/.*following platform tag: *"\(manylinux_[0-9a-z_]*\)".*/\1/p')
if [[ -n $plat ]]; then
    step "the wheel qualifies for $plat: retagging"
    "$VPY" -m wheel tags --remove --platform-tag "$plat" "$wheel" >/dev/null
    wheel=$(ls "$WORK"/dist/libmonarch-"$VERSION"-*"$plat"*.whl)
else
    echo "test-install: the wheel does not qualify for a manylinux tag:" >&2
    cat "$WORK/auditwheel.txt" >&2
fi
unzip -l "$wheel" | awk 'NR > 3 && $4 != "" { print $1, $4 }' >"$WORK/wheel.lst"
for f in "monarch/libmonarch.so.$MAJOR" monarch/monarch.h monarch/_monarch_api.abi3.so "libmonarch-$VERSION.data/scripts/monarch" \
    "libmonarch-$VERSION.dist-info/licenses/LICENSE"; do
    grep -q " $f\$" "$WORK/wheel.lst" || fail "the wheel has no $f"
done
step "wheel $(basename "$wheel"): $(du -k "$wheel" | cut -f1) KiB"

step "fresh venv outside the repository"
"$PYTHON" -m venv "$WORK/venv"
"$WORK/venv/bin/python" -m pip install --disable-pip-version-check -q "$wheel"
mkdir "$WORK/user"
cp examples/python/hello_mesh.py "$WORK/user/"
# Only the venv and the system on PATH; no PYTHONPATH or MONARCH_* from here.
user_env=(env -i "HOME=$HOME" "PATH=$WORK/venv/bin:/usr/bin:/bin" "TMPDIR=${TMPDIR:-/tmp}")
(cd "$WORK/user" && "${user_env[@]}" "$WORK/venv/bin/python" - "$VERSION" "$MAJOR") <<'EOF' || fail "the installed package is not the expected one"
import os, sys
import monarch
from monarch import _lib, _monarch_api
from monarch.actor import monarch_binary

version, major = sys.argv[1], sys.argv[2]
assert monarch.__version__ == version, (monarch.__version__, version)
assert "site-packages" in monarch.__file__, monarch.__file__
assert _lib.lib is _monarch_api.lib, "not the compiled cffi module"
assert os.path.basename(_lib.LIBRARY_PATH) == f"libmonarch.so.{major}", _lib.LIBRARY_PATH
assert monarch_binary() == os.path.join(os.path.dirname(sys.executable), "monarch"), monarch_binary()
EOF
step "examples/python/hello_mesh.py from $WORK/user"
(cd "$WORK/user" && "${user_env[@]}" timeout 120 "$WORK/venv/bin/python" hello_mesh.py >"$WORK/demo.log" 2>&1) ||
    { cat "$WORK/demo.log" >&2; fail "the demo failed in the fresh venv"; }
[[ $(cd "$WORK/user" && "${user_env[@]}" sh -c 'command -v monarch') == "$WORK/venv/bin/monarch" ]] ||
    fail "monarch is not on PATH from the venv"
(cd "$WORK/user" && "${user_env[@]}" monarch --help >/dev/null) || fail "monarch --help failed"

# ---------------------------------------------------------------- C / C++
prefix="$WORK/prefix"
step "make install PREFIX=$prefix"
make --no-print-directory install PREFIX="$prefix" >"$WORK/install.log" 2>&1 ||
    { cat "$WORK/install.log" >&2; fail "make install PREFIX= failed"; }
pc=$(find "$prefix" -name monarch.pc)
[[ -n $pc ]] || fail "no monarch.pc under $prefix"
libdir=$(dirname "$(dirname "$pc")")
export PKG_CONFIG_PATH="$libdir/pkgconfig"
[[ $(pkg-config --modversion monarch) == "$VERSION" ]] || fail "pkg-config says $(pkg-config --modversion monarch)"
[[ -x $prefix/bin/monarch && -f $prefix/include/monarch.h && -f $libdir/libmonarch.a ]] ||
    fail "the prefix lacks bin/monarch, include/monarch.h or libmonarch.a"
[[ -f $libdir/cmake/Monarch/MonarchConfig.cmake && -f $prefix/share/doc/Monarch/LICENSE ]] ||
    fail "the prefix lacks the CMake config or the LICENSE"

step "SONAME and symlinks"
[[ $(readlink "$libdir/libmonarch.so") == "libmonarch.so.$MAJOR" ]] || fail "libmonarch.so is not a link to libmonarch.so.$MAJOR"
[[ $(readlink "$libdir/libmonarch.so.$MAJOR") == "libmonarch.so.$VERSION" ]] || fail "libmonarch.so.$MAJOR is not a link to libmonarch.so.$VERSION"
for lib in "$libdir/libmonarch.so.$VERSION" target/release/libmonarch.so; do
    soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
    [[ $soname == "libmonarch.so.$MAJOR" ]] || fail "$lib has SONAME '$soname'"
done

step "a C program with pkg-config --cflags --libs monarch"
# shellcheck disable=SC2046 # pkg-config's words are separate arguments
cc -std=c11 -Wall -Werror -o "$WORK/hello_c" tests/install/hello.c $(pkg-config --cflags --libs monarch) \
    -Wl,-rpath,"$(pkg-config --variable=libdir monarch)"
[[ $(readelf -d "$WORK/hello_c" | grep -c "Shared library: \[libmonarch.so.$MAJOR\]") == 1 ]] ||
    fail "hello_c does not ask for libmonarch.so.$MAJOR"
[[ $("$WORK/hello_c") == "libmonarch $VERSION" ]] || fail "hello_c printed the wrong version"

step "a C++ program with find_package(Monarch 0.1)"
"$CMAKE" -S tests/install -B "$WORK/cpp" -DCMAKE_PREFIX_PATH="$prefix" >"$WORK/cmake.log" 2>&1 ||
    { cat "$WORK/cmake.log" >&2; fail "cmake configure failed"; }
"$CMAKE" --build "$WORK/cpp" >>"$WORK/cmake.log" 2>&1 || { cat "$WORK/cmake.log" >&2; fail "the C++ build failed"; }
out=$(timeout 120 "$WORK/cpp/hello_cpp") || fail "hello_cpp failed: $out"
[[ $out == "sum of replies 84" ]] || fail "hello_cpp printed '$out'"

step "find_package(Monarch 0.2) refuses the $VERSION package"
if "$CMAKE" -S tests/install -B "$WORK/cpp-0.2" -DCMAKE_PREFIX_PATH="$prefix" -DMONARCH_REQUEST=0.2 >"$WORK/cmake-0.2.log" 2>&1; then
    fail "find_package(Monarch 0.2) accepted version $VERSION"
fi
grep -q "$VERSION" "$WORK/cmake-0.2.log" || { cat "$WORK/cmake-0.2.log" >&2; fail "cmake failed for another reason"; }

# No proc of the demos outlives them.
if pgrep -f "$WORK" >/dev/null; then
    pgrep -af "$WORK" >&2
    fail "processes from $WORK are still running"
fi
echo "test-install: passed in $((SECONDS - start)) s"
