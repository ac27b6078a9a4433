#!/usr/bin/env bash
# with-cluster.sh CMD [ARGS...]: install SLURM if missing, bring the test
# cluster up (up.sh), run CMD with SLURM_CONF and MONARCH_SLURM_TEST=1
# exported, then stop the cluster
# (down.sh) whatever CMD did; exits with CMD's status. After CMD, fails if a
# job is still queued or running (a leaked allocation). Runs hold a lock
# (<MONARCH_SLURM_DIR>.lock), so concurrent runs take turns.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=common.sh
source "$here/common.sh"

# One user of the test cluster at a time: two `make test` runs on one
# machine (several worktrees) would otherwise share it, and the first to
# finish would stop it under the other.
lock="${SLURM_DIR}.lock"
exec 9>"$lock"
if ! flock -n 9; then
    slurm_log "waiting for another run using the test cluster ($lock)"
    flock -w 1800 9 || { slurm_log "gave up waiting for $lock"; exit 1; }
fi

"$here/install.sh"
eval "$("$here/up.sh")"
export SLURM_CONF
# Tests that need the cluster run for real (and fail without it) under this.
export MONARCH_SLURM_TEST=1
trap '"$here/down.sh"' EXIT
status=0
"$@" || status=$?
# Jobs that just ended stay COMPLETING for a moment: give them 30 s.
deadline=$((SECONDS + 30))
while :; do
    left="$(squeue -h -o '%i %j %T' 2>/dev/null || true)"
    [[ -n "$left" ]] && ((SECONDS < deadline)) || break
    sleep 0.2
done
if [[ -n "$left" ]]; then
    slurm_log "FAIL: jobs left in the queue after the tests:"
    echo "$left" >&2
    ((status != 0)) || status=1
fi
exit "$status"
