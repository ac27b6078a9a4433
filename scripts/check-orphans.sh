#!/usr/bin/env bash
# Fail if a proc process (Python `monarch._bootstrap` or `monarch worker`) or
# a host agent (`monarch host`) outlived the tests. With MONARCH_ORPHAN_TAG set (as `make test` does), only
# processes carrying that tag in their environment count, so processes of
# other programs running on the same machine are reported but do not fail the
# check. Waits up to ORPHAN_GRACE seconds (default 3) for dying procs to go.
set -euo pipefail

tag="${MONARCH_ORPHAN_TAG:-}"
grace="${ORPHAN_GRACE:-3}"

scan() {
    # The bracket in each pattern keeps this script's own command line (and
    # pgrep's) from matching.
    pgrep -af '[m]onarch\._bootstrap|[m]onarch(\s+|/[^ ]*\s+)(worker|host)\b' || true
}

ours() {
    local line pid
    while IFS= read -r line; do
        [[ -z "$line" ]] && continue
        pid="${line%% *}"
        [[ "$pid" == "$$" ]] && continue
        if [[ -z "$tag" ]] || tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qxF "MONARCH_ORPHAN_TAG=$tag"; then
            echo "$line"
        fi
    done
}

deadline=$((SECONDS + grace))
while :; do
    found="$(scan | ours)"
    if [[ -z "$found" ]] || ((SECONDS >= deadline)); then
        break
    fi
    sleep 0.2
done

others="$(scan)"
if [[ -n "$found" ]]; then
    echo "check-orphans: FAIL: proc processes still running after the tests:" >&2
    echo "$found" >&2
    exit 1
fi
if [[ -n "$others" && -n "$tag" ]]; then
    echo "check-orphans: note: proc processes not started by this run (ignored):"
    echo "$others"
fi
echo "check-orphans: no orphaned proc processes"
