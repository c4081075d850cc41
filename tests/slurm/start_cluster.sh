#!/usr/bin/env bash
# Start a one-node SLURM cluster on this machine, for tests/workflow/test_slurm.py.
#
# Installs Debian's slurm-wlm and munge when they are missing (needs root and apt-get),
# writes /etc/slurm/slurm.conf for this machine's cores and memory (the node line comes
# from `slurmd -C`), and starts munged, slurmctld and slurmd in the background. No
# slurmdbd: job states come from squeue, which keeps finished jobs for MinJobAge seconds.
# The node declares two stand-in GPUs (GRES backed by /dev/null and /dev/zero), so a job
# asking for `--gpus=1` is scheduled as on a GPU cluster (SLURM sets CUDA_VISIBLE_DEVICES)
# and then trains on the CPU, since there is no CUDA here.
#
# Idempotent: exits at once when the cluster already answers. Never touches a
# slurm.conf it did not write.
# Exit codes: 0 running; 3 cannot install (not root, no apt-get, install failed);
# 4 a foreign slurm.conf exists; 5 started but the node never became usable.
set -euo pipefail

CONF_DIR=/etc/slurm
CONF="$CONF_DIR/slurm.conf"
MARKER="# written by rnnfleet tests/slurm/start_cluster.sh"
PARTITION=rnnfleet
LOG_DIR=/var/log/slurm

say() { echo "start_cluster: $*" >&2; }

node_ready() {
    # The node is up and accepts jobs (idle, mixed or allocated; not down/drained).
    local state
    state=$(sinfo --noheader --partition "$PARTITION" --format %T 2>/dev/null | head -1) || return 1
    [[ "$state" =~ ^(idle|mixed|allocated|completing)$ ]]
}

if command -v sinfo >/dev/null && grep -qF "$MARKER" "$CONF" 2>/dev/null && node_ready; then
    exit 0
fi

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
    if [[ $EUID -ne 0 ]]; then
        say "slurm-wlm and munge are not installed and installing them needs root"
        exit 3
    fi
    if ! command -v apt-get >/dev/null; then
        say "slurm-wlm and munge are not installed and there is no apt-get to install them"
        exit 3
    fi
    install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge; }
    # Try without refreshing the package lists first: quick where they are recent.
    if ! install >/dev/null 2>&1; then
        apt-get update -qq >/dev/null 2>&1 || true
        if ! install >/dev/null; then
            say "apt-get could not install slurm-wlm and munge"
            exit 3
        fi
    fi
fi
if [[ $EUID -ne 0 ]]; then
    say "SLURM is installed but its daemons are not running, and starting them needs root"
    exit 3
fi

if [[ -e "$CONF" ]] && ! grep -qF "$MARKER" "$CONF"; then
    say "$CONF exists and was not written by this script: not touching a real cluster's configuration"
    exit 4
fi

node_line=$(slurmd -C | head -1)
node_name=$(sed -n 's/^NodeName=\([^ ]*\).*/\1/p' <<<"$node_line")
mkdir -p "$CONF_DIR" "$LOG_DIR" /var/spool/slurmctld /var/spool/slurmd
cat >"$CONF" <<EOF
$MARKER
ClusterName=rnnfleet
SlurmctldHost=$node_name(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1000
# Jobs stay visible to squeue for an hour after they end: the executor plugin's status
# checks use squeue (there is no accounting database here).
MinJobAge=3600
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
ReturnToService=2
GresTypes=gpu
$node_line NodeAddr=127.0.0.1 Gres=gpu:2 State=UNKNOWN
PartitionName=$PARTITION Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
cat >"$CONF_DIR/gres.conf" <<EOF
$MARKER
# slurmd counts a GPU only with a device file behind it; any two files stand in here.
NodeName=$node_name Name=gpu File=/dev/null
NodeName=$node_name Name=gpu File=/dev/zero
EOF

if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    [[ -s /etc/munge/munge.key ]] || mungekey --create --keyfile=/etc/munge/munge.key
    chown munge:munge /etc/munge/munge.key
    chmod 0400 /etc/munge/munge.key
    mkdir -p /run/munge /var/log/munge /var/lib/munge
    chown munge:munge /run/munge /var/log/munge /var/lib/munge
    runuser -u munge -- /usr/sbin/munged
fi

# Restart the SLURM daemons so they read the configuration written above.
source "$(dirname "${BASH_SOURCE[0]}")/daemons.sh"
for daemon in slurmd slurmctld; do
    stop_daemon "$daemon" "/run/$daemon.pid"
done
slurmctld
slurmd

for _ in $(seq 60); do
    if node_ready; then
        exit 0
    fi
    # A node that was down when slurmctld last ran comes back only when told to.
    scontrol update nodename="$node_name" state=resume >/dev/null 2>&1 || true
    sleep 0.5
done
say "slurmctld and slurmd started but node $node_name never became idle; see $LOG_DIR/slurmctld.log and slurmd.log"
sinfo -N -l >&2 || true
exit 5
