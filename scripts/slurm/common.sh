# Shared settings of the test SLURM cluster scripts (sourced, not run).
#
#   MONARCH_SLURM_DIR    state directory (config, logs, spool, munge socket);
#                        default /tmp/monarch-slurm-<uid>
#   MONARCH_SLURM_PORT   slurmctld's port; slurmd i listens on PORT+i
#                        (default 16817, so 16818 and 16819)
#   MONARCH_SLURM_NODES  number of slurmd daemons / nodes (default 2)
#
# Everything the cluster writes lives under MONARCH_SLURM_DIR; nothing in
# /etc is changed. Clients find the cluster through SLURM_CONF, which
# `up.sh` prints and `with-cluster.sh` exports.

SLURM_DIR="${MONARCH_SLURM_DIR:-/tmp/monarch-slurm-$(id -u)}"
SLURM_PORT="${MONARCH_SLURM_PORT:-16817}"
SLURM_NODES="${MONARCH_SLURM_NODES:-2}"
SLURM_CONF_FILE="$SLURM_DIR/slurm.conf"
MUNGE_SOCKET="$SLURM_DIR/munge/munge.socket"

slurm_log() { echo "slurm-test-cluster: $*" >&2; }

# node_names: n1 n2 ...
node_names() {
    local i
    for ((i = 1; i <= SLURM_NODES; i++)); do echo "n$i"; done
}

# pid_alive FILE NAME: the pid in FILE is a live process whose command is NAME.
pid_alive() {
    local file="$1" name="$2" pid
    [[ -r "$file" ]] || return 1
    pid="$(tr -dc 0-9 <"$file")"
    proc_alive "$pid" "$name"
}

pid_of() { tr -dc 0-9 <"$1" 2>/dev/null || true; }

# proc_alive PID NAME: PID is a live (not zombie) process whose command is NAME.
proc_alive() {
    local pid="$1" name="$2" stat
    [[ -n "$pid" ]] || return 1
    [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == "$name" ]] || return 1
    stat="$(cat "/proc/$pid/stat" 2>/dev/null)" || return 1
    stat="${stat##*) }"
    [[ "${stat%% *}" != Z ]]
}

# ctl CMD ARGS...: a SLURM client command against the test cluster.
ctl() { SLURM_CONF="$SLURM_CONF_FILE" "$@"; }
