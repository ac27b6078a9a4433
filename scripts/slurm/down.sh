#!/usr/bin/env bash
# Stop the SLURM test cluster started by up.sh: cancel its jobs, stop
# slurmctld, the slurmd daemons and munged (by the pids they wrote under
# MONARCH_SLURM_DIR), SIGKILL whatever is still running after a grace period.
# Idempotent: stopping a cluster that is not running succeeds. Keeps the logs
# (MONARCH_SLURM_DIR/log) for a post-mortem; up.sh clears the directory.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=common.sh
source "$here/common.sh"
export PATH="$PATH:/usr/sbin:/sbin"

[[ -d "$SLURM_DIR/run" ]] || exit 0

# Read the pids first: the daemons remove their pid files while exiting.
declare -A pids=()
for n in $(node_names); do
    pid_alive "$SLURM_DIR/run/slurmd.$n.pid" slurmd && pids["slurmd.$n"]="$(pid_of "$SLURM_DIR/run/slurmd.$n.pid")"
done
pid_alive "$SLURM_DIR/run/slurmctld.pid" slurmctld && pids[slurmctld]="$(pid_of "$SLURM_DIR/run/slurmctld.pid")"
pid_alive "$SLURM_DIR/run/munged.pid" munged && pids[munged]="$(pid_of "$SLURM_DIR/run/munged.pid")"

if [[ -n "${pids[slurmctld]:-}" ]]; then
    # Cancel every job of the test cluster and wait for them to go, so no
    # task (a host agent, say) outlives it.
    jobs="$(ctl squeue -h -o %i 2>/dev/null || true)"
    if [[ -n "$jobs" ]]; then
        slurm_log "cancelling jobs: $(paste -sd' ' <<<"$jobs")"
        # shellcheck disable=SC2086
        ctl scancel $jobs 2>/dev/null || true
        deadline=$((SECONDS + 20))
        while [[ -n "$(ctl squeue -h -o %i 2>/dev/null || true)" ]] && ((SECONDS < deadline)); do
            sleep 0.3
        done
    fi
    ctl scontrol shutdown >/dev/null 2>&1 || true
fi

# stop KEY: SIGTERM the daemon pids[KEY], wait up to 10 s, then SIGKILL.
stop() {
    local key="$1" name="${1%%.*}" pid="${pids[$1]:-}" i
    [[ -n "$pid" ]] || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
        proc_alive "$pid" "$name" || return 0
        sleep 0.1
    done
    slurm_log "$key ($pid) still running after 10 s: SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
}

for n in $(node_names); do
    stop "slurmd.$n"
done
stop slurmctld
stop munged
rm -f "$SLURM_DIR"/run/*.pid
slurm_log "down"
