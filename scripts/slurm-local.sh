#!/usr/bin/env bash
# A single-node SLURM cluster on this machine, from Debian's packages, to test the cluster profile.
#   scripts/slurm-local.sh up       install what is missing (root), write the config, start munge, slurmctld, slurmd
#   scripts/slurm-local.sh down     stop the daemons (the state folder is wiped on the next `up`)
#   scripts/slurm-local.sh status   the node and the queue
# Idempotent: `up` on a running cluster restarts it from a clean state, so an old drained mark does
# not stick. It writes /etc/slurm/slurm.conf and gres.conf (Debian's default paths, where sbatch,
# squeue and scontrol look) and keeps state and logs under $SLURM_LOCAL_DIR (default /var/lib/slurm-local).
# Needs root: munged runs as the munge user and slurmd as root.
# Refuses to run where a SLURM configuration it did not write exists, or SLURM daemons run under
# one: it is for a throwaway machine (CI, a container), never for a host that is part of a cluster.
set -euo pipefail

DIR=${SLURM_LOCAL_DIR:-/var/lib/slurm-local}
CONF=${SLURM_CONF:-/etc/slurm/slurm.conf}  # SLURM_CONF: where SLURM's own tools look, too
MARKER="# Written by scripts/slurm-local.sh"

only_our_own() {
    # A configuration this script did not write belongs to a real cluster: do not overwrite it,
    # and do not stop daemons that run under it.
    if [ -e "$CONF" ] && ! head -n 1 "$CONF" | grep -qF "$MARKER"; then
        echo "slurm-local: $CONF exists and was not written by this script; refusing to overwrite it" \
             "or to stop SLURM daemons (use a throwaway machine or container)" >&2
        exit 1
    fi
    if [ ! -e "$CONF" ] && { pgrep -x slurmctld >/dev/null || pgrep -x slurmd >/dev/null; }; then
        echo "slurm-local: SLURM daemons run without $CONF (another configuration); refusing to stop them" >&2
        exit 1
    fi
}
PACKAGES=(slurmctld slurmd slurm-client munge)

need_root() {
    if [ "$(id -u)" != 0 ]; then
        echo "slurm-local: must run as root (munge and slurmd need it)" >&2
        exit 1
    fi
}

install_packages() {
    local missing=()
    for p in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        echo "slurm-local: installing ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
}

write_config() {
    # The node line comes from slurmd -C (the machine's real CPUs and memory), renamed localhost.
    local node
    node=$(slurmd -C | head -n 1 | sed -e 's/^NodeName=[^ ]*/NodeName=localhost/' -e 's/ Boards=[^ ]*//')
    mkdir -p "$(dirname "$CONF")" "$DIR"
    cat > "$CONF" <<EOF
$MARKER: a one-node test cluster. Do not use on a real cluster.
ClusterName=local
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1000
# Accounting off: the executor plugin must poll squeue (slurm-status-command: squeue), not sacct.
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/jobcomp.txt
# Keep finished jobs visible to squeue for an hour.
MinJobAge=3600
# A fake GPU, so that GPU rules are submitted with a GPU request as on a real cluster.
GresTypes=gpu
$node Gres=gpu:1 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
    echo "Name=gpu File=/dev/null" > "$(dirname "$CONF")/gres.conf"
}

stop_daemons() {
    pkill -x slurmd 2>/dev/null || true
    pkill -x slurmctld 2>/dev/null || true
    for _ in $(seq 50); do
        pgrep -x slurmd >/dev/null || pgrep -x slurmctld >/dev/null || break
        sleep 0.1
    done
}

up() {
    only_our_own
    need_root
    install_packages
    stop_daemons
    rm -rf "$DIR/state" "$DIR/spool"  # a clean state: no drained node, no old jobs
    mkdir -p "$DIR/state" "$DIR/spool"
    write_config
    mkdir -p /run/munge && chown munge:munge /run/munge
    if ! pgrep -x munged >/dev/null; then
        runuser -u munge -- /usr/sbin/munged
    fi
    slurmctld
    slurmd -N localhost
    for _ in $(seq 100); do
        if sinfo -h -o %T 2>/dev/null | grep -qx idle; then
            echo "slurm-local: up ($(sinfo -h -o '%P %D %T %c CPUs %m MB %G'))"
            return 0
        fi
        sleep 0.1
    done
    echo "slurm-local: the node did not become idle; logs in $DIR" >&2
    sinfo -R >&2 || true
    exit 1
}

down() {
    only_our_own
    need_root
    stop_daemons
    pkill -x munged 2>/dev/null || true
    echo "slurm-local: down"
}

status() {
    sinfo -o '%P %D %T %c %m %G' && squeue
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    status) status ;;
    *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
