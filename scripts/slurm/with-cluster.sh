#!/usr/bin/env bash
# with-cluster.sh CMD [ARGS...]: install SLURM if missing, bring the test
# cluster up (up.sh), run CMD with SLURM_CONF and MONARCH_SLURM_TEST=1
# exported, then stop the cluster
# (down.sh) whatever CMD did; exits with CMD's status. After CMD, fails if a
# job is still queued or running (a leaked allocation).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=common.sh
source "$here/common.sh"

"$here/install.sh"
eval "$("$here/up.sh")"
export SLURM_CONF
# Tests that need the cluster run for real (and fail without it) under this.
export MONARCH_SLURM_TEST=1
trap '"$here/down.sh"' EXIT
status=0
"$@" || status=$?
left="$(squeue -h -o '%i %j %T' 2>/dev/null || true)"
if [[ -n "$left" ]]; then
    slurm_log "FAIL: jobs left in the queue after the tests:"
    echo "$left" >&2
    ((status != 0)) || status=1
fi
exit "$status"
