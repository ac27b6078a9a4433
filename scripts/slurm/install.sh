#!/usr/bin/env bash
# Install Debian's SLURM (slurm-wlm: slurmctld, slurmd, srun, ...) and MUNGE
# when any of their programs is missing; do nothing otherwise. Needs root (or
# sudo) and apt-get. Used by `make test` before the SLURM tests.
set -euo pipefail

missing=()
for prog in slurmctld slurmd srun salloc squeue scontrol sinfo munged; do
    command -v "$prog" >/dev/null 2>&1 || PATH="$PATH:/usr/sbin:/sbin" command -v "$prog" >/dev/null 2>&1 || missing+=("$prog")
done
if ((${#missing[@]} == 0)); then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "slurm install: missing ${missing[*]} and no apt-get: install SLURM and MUNGE by hand" >&2
    exit 1
fi
sudo=()
if [[ "$(id -u)" != 0 ]]; then
    command -v sudo >/dev/null 2>&1 || { echo "slurm install: missing ${missing[*]}; need root or sudo to apt-get install slurm-wlm munge" >&2; exit 1; }
    sudo=(sudo)
fi
echo "slurm install: missing ${missing[*]}: apt-get install slurm-wlm munge" >&2
start=$SECONDS
export DEBIAN_FRONTEND=noninteractive
# Package lists may be absent on a fresh machine (or stale): update first.
"${sudo[@]}" apt-get update -q >/dev/null
"${sudo[@]}" apt-get install -y -q --no-install-recommends slurm-wlm munge >/dev/null
echo "slurm install: done in $((SECONDS - start)) s" >&2
