#!/usr/bin/env bash
# A real, single-machine SLURM cluster for CI: munged + slurmctld + slurmd on loopback,
# one node, one partition, and fake GPUs so that `--gpus=N` schedules like on a GPU node.
#
#   .ci/slurm.sh up       install (apt, once) if missing, write config, start, wait for idle
#   .ci/slurm.sh status   print daemons and node state; exit 0 only if the node takes jobs
#   .ci/slurm.sh down     stop the daemons this script started (by pid file)
#
# Every step is idempotent and bounded by a timeout; needs root (Debian/Ubuntu).
# Knobs (environment): SLURM_CI_GPUS (fake GPU count, default 4), SLURM_CI_PARTITION
# (default "ci"), SLURM_CI_TIMEOUT (seconds to wait for readiness, default 60).
#
# Why the config looks like this (Slurm 22.05 as packaged by Debian 12):
# - accounting is off, so `sacct` fails: snakemake's slurm executor must be run with
#   `--slurm-status-command squeue` (see profiles/ci-slurm/config.yaml);
# - proctrack/linuxproc + task/none: no cgroups inside containers;
# - a GRES given only as a count makes the node INVALID, so each fake GPU is a
#   `File=` entry pointing at a symlink to /dev/null; jobs still get CUDA_VISIBLE_DEVICES;
# - MinJobAge=300 keeps finished jobs visible to `squeue`/`scontrol` long enough for
#   the executor to see their final state.
set -euo pipefail

GPUS="${SLURM_CI_GPUS:-4}"
PARTITION="${SLURM_CI_PARTITION:-ci}"
WAIT_S="${SLURM_CI_TIMEOUT:-60}"
NODE="$(hostname -s)"
CONF_DIR=/etc/slurm
STATE_DIR=/var/lib/shardflow-slurm-ci    # pid files, fake GPU device links
LOG_DIR=/var/log/slurm
PKGS=(slurmctld slurmd slurm-client munge)

log() { printf '[slurm.sh] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# ---- helpers --------------------------------------------------------------------------

pid_alive() {  # pid_alive NAME -> 0 if the daemon recorded in NAME.pid is running
    local f="$STATE_DIR/$1.pid"
    [[ -s "$f" ]] && kill -0 "$(cat "$f")" 2>/dev/null
}

wait_for() {  # wait_for SECONDS DESCRIPTION CMD... -> poll CMD every 0.2 s
    local limit=$1 what=$2; shift 2
    local deadline=$((SECONDS + limit))
    until "$@" >/dev/null 2>&1; do
        (( SECONDS < deadline )) || { log "timed out after ${limit}s waiting for $what"; return 1; }
        sleep 0.2
    done
}

node_state() { timeout 10 sinfo -h -N -n "$NODE" -o '%T' 2>/dev/null | head -n1; }

node_usable() {  # idle, mixed or allocated (possibly with a trailing flag like '*')
    [[ "$(node_state)" =~ ^(idle|mixed|allocated) ]]
}

# ---- install --------------------------------------------------------------------------

install_if_missing() {
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null \
        && command -v sinfo >/dev/null && command -v munged >/dev/null; then
        return
    fi
    [[ $EUID -eq 0 ]] || die "SLURM is not installed and installing it needs root"
    log "installing ${PKGS[*]} (apt)"
    export DEBIAN_FRONTEND=noninteractive
    timeout 300 apt-get update -qq
    timeout 600 apt-get install -y -qq --no-install-recommends "${PKGS[@]}" >/dev/null
}

# ---- configuration --------------------------------------------------------------------

write_if_changed() {  # write_if_changed PATH (content on stdin) -> 0 if the file changed
    local tmp; tmp="$(mktemp "$1.XXXX")"
    cat >"$tmp"
    if [[ -f "$1" ]] && cmp -s "$tmp" "$1"; then rm -f "$tmp"; return 1; fi
    chmod 0644 "$tmp"; mv -f "$tmp" "$1"
}

write_config() {  # -> 0 if slurm.conf or gres.conf changed
    mkdir -p "$CONF_DIR" "$STATE_DIR/gpu" "$LOG_DIR" /var/spool/slurmctld /var/spool/slurmd
    local i
    for ((i = 0; i < GPUS; i++)); do ln -sfn /dev/null "$STATE_DIR/gpu/nvidia$i"; done

    local cpus mem_mb changed=1
    cpus="$(nproc)"
    # Leave 1 GiB to the OS; memory is a consumable resource (CR_Core_Memory).
    mem_mb=$(( $(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo) - 1024 ))
    local gres_line="" gpu_files=""
    if (( GPUS > 0 )); then
        gres_line="Gres=gpu:$GPUS"
        gpu_files="NodeName=$NODE Name=gpu File=$STATE_DIR/gpu/nvidia[0-$((GPUS - 1))]"
    fi

    write_if_changed "$CONF_DIR/slurm.conf" <<EOF && changed=0
# Written by .ci/slurm.sh: a one-node CI cluster on loopback. Do not edit by hand.
ClusterName=shardflow-ci
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=500
GresTypes=gpu
ReturnToService=2
MinJobAge=300
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=$STATE_DIR/slurmctld.pid
SlurmdPidFile=$STATE_DIR/slurmd.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb $gres_line State=UNKNOWN
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
    write_if_changed "$CONF_DIR/gres.conf" <<EOF && changed=0
# Written by .ci/slurm.sh: fake GPUs (symlinks to /dev/null) so that --gpus schedules.
$gpu_files
EOF
    return $changed
}

# ---- daemons --------------------------------------------------------------------------

start_munge() {
    if timeout 5 munge -n </dev/null 2>/dev/null | timeout 5 unmunge >/dev/null 2>&1; then
        return  # some munged (ours or the system's) already answers
    fi
    if [[ ! -s /etc/munge/munge.key ]]; then
        log "creating /etc/munge/munge.key"
        mkdir -p /etc/munge
        dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    fi
    chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key
    mkdir -p /run/munge /var/lib/munge /var/log/munge
    chown munge:munge /run/munge /var/lib/munge /var/log/munge
    # munged forks; its own pid file is the record of what we started.
    timeout 10 runuser -u munge -- munged --pid-file=/run/munge/munged.pid
    ln -sfn /run/munge/munged.pid "$STATE_DIR/munged.pid"
    wait_for 10 "munged" bash -c 'munge -n </dev/null | unmunge'
}

start_slurm() {
    if ! pid_alive slurmctld; then
        # -i: ignore any saved state (a stale DOWN node from an earlier run).
        slurmctld -i
        wait_for "$WAIT_S" "slurmctld" timeout 5 scontrol ping
    fi
    if ! pid_alive slurmd; then
        slurmd -N "$NODE"
    fi
    if ! wait_for "$WAIT_S" "node $NODE to become idle" node_usable; then
        # A node left DOWN/DRAIN by an earlier run: try once to resume it.
        timeout 10 scontrol update NodeName="$NODE" State=RESUME || true
        wait_for 10 "node $NODE to resume" node_usable || {
            log "node state: $(node_state)"; tail -n 20 "$LOG_DIR/slurmd.log" >&2 || true
            die "SLURM node $NODE is not usable"
        }
    fi
}

stop_daemon() {  # stop_daemon NAME -> SIGTERM, wait up to 10 s, then SIGKILL
    local f="$STATE_DIR/$1.pid" pid
    [[ -s "$f" ]] || return 0
    pid="$(cat "$f")"
    if kill -0 "$pid" 2>/dev/null; then
        kill "$pid" 2>/dev/null || true
        wait_for 10 "$1 to exit" bash -c "! kill -0 $pid" || kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$f"
}

# ---- commands -------------------------------------------------------------------------

cmd_up() {
    install_if_missing
    mkdir -p "$STATE_DIR"
    if write_config && { pid_alive slurmctld || pid_alive slurmd; }; then
        log "configuration changed: restarting slurmd and slurmctld"
        stop_daemon slurmd; stop_daemon slurmctld
    fi
    start_munge
    start_slurm
    log "up: node $NODE $(node_state), partition $PARTITION, $GPUS fake GPUs"
}

cmd_down() {
    stop_daemon slurmd
    stop_daemon slurmctld
    stop_daemon munged
    # With slurm.conf in place but no controller, every `scontrol`/`sinfo` call retries
    # for ~9 s -- and snakemake-executor-plugin-slurm runs `scontrol show config` each time
    # any Snakemake process starts (it builds its --help text at import), so every local
    # job would start 9 s late. Without a config file the call fails at once.
    if [[ -f "$CONF_DIR/slurm.conf" ]]; then mv -f "$CONF_DIR/slurm.conf" "$CONF_DIR/slurm.conf.down"; fi
    log "down"
}

cmd_status() {
    local name
    for name in munged slurmctld slurmd; do
        if pid_alive "$name"; then echo "$name: running (pid $(cat "$STATE_DIR/$name.pid"))"
        else echo "$name: not running"; fi
    done
    if [[ ! -f "$CONF_DIR/slurm.conf" ]]; then echo "no $CONF_DIR/slurm.conf: cluster down"; return 1; fi
    timeout 10 sinfo -N -o '%N %P %T %G' || true
    node_usable
}

case "${1:-}" in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
