#!/usr/bin/env bash
# A real two-node Slurm cluster on this machine, the test bed of the Slurm provider
# (src/slurm, tests/it/slurm.rs start it themselves). Both slurmd daemons run on loopback with
# their own NodeName and port (PORT+2 and PORT+3, PORT = SLURM_TEST_PORT, default 16817, is
# slurmctld's); munged authenticates. Each node declares two fake GPUs (GresTypes=gpu,
# Gres=gpu:2) so `--gpus-per-node`/`--gres` requests are scheduled and pre-flight can check
# gres. Slurm 22.05 drops file-less GPUs from gres.conf, so each fake GPU is a character
# device DIR/dev/gpuN with /dev/null's numbers (1,3). Usage:
#   scripts/slurm-cluster.sh start DIR   # writes DIR/slurm.conf, starts munged, slurmctld, 2 slurmd
#   scripts/slurm-cluster.sh stop DIR    # stops the daemons started from DIR
# Then `export SLURM_CONF=DIR/slurm.conf` and sinfo/salloc/srun/scancel talk to it.
# Needs Debian's slurm-wlm and munge (apt-get install slurm-wlm munge; .ci/run installs them)
# and root (slurmd runs jobs as the caller).
set -euo pipefail
cmd=${1:?start|stop}; dir=$(realpath -m "${2:?directory}")
base=${SLURM_TEST_PORT:-16817}
case "$cmd" in
start)
  mkdir -p "$dir"/{state,spool/n1,spool/n2,log}
  if [ ! -s /etc/munge/munge.key ]; then
    mungekey -c -f 2>/dev/null || dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
  fi
  chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
  mkdir -p /run/munge && chown munge:munge /run/munge
  munge -n >/dev/null 2>&1 || su -s /bin/sh munge -c munged
  cat >"$dir/slurm.conf" <<CONF
ClusterName=orchestrate-test
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$base
SlurmdPort=$((base + 1))
AuthType=auth/munge
SlurmUser=root
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
ReturnToService=2
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldPidFile=$dir/slurmctld.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
NodeName=n1 NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((base + 2)) CPUs=2 RealMemory=1000 Gres=gpu:2 State=UNKNOWN
NodeName=n2 NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((base + 3)) CPUs=2 RealMemory=1000 Gres=gpu:2 State=UNKNOWN
PartitionName=gpu Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP
CONF
  mkdir -p "$dir/dev"
  for n in 0 1; do [ -c "$dir/dev/gpu$n" ] || mknod "$dir/dev/gpu$n" c 1 3; done
  echo "NodeName=n[1-2] Name=gpu File=$dir/dev/gpu[0-1]" >"$dir/gres.conf"
  export SLURM_CONF=$dir/slurm.conf
  slurmctld -c
  slurmd -N n1
  slurmd -N n2
  for _ in $(seq 50); do
    [ "$(sinfo -h -o %T 2>/dev/null | sort -u)" = idle ] && { sinfo; exit 0; }
    sleep 0.2
  done
  echo "slurm-cluster: nodes not idle after 10 s; see $dir/log" >&2; sinfo >&2 || true; exit 1
  ;;
stop)
  pids=()
  for f in "$dir"/slurmd-n1.pid "$dir"/slurmd-n2.pid "$dir"/slurmctld.pid; do
    pid=$(cat "$f" 2>/dev/null || true)   # read once: a daemon removes its file as it exits
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && pids+=("$pid")
  done
  # Wait (up to 5 s) until they are gone, so DIR can be removed after.
  for _ in $(seq 25); do
    alive=0
    for p in "${pids[@]}"; do
      # A zombie (killed, not reaped yet by its parent) counts as gone.
      state=$(ps -o stat= -p "$p" 2>/dev/null || true)
      case "$state" in "" | Z*) ;; *) alive=1 ;; esac
    done
    [ "$alive" = 0 ] && break
    sleep 0.2
  done
  ;;
*) echo "usage: $0 start|stop DIR" >&2; exit 2 ;;
esac
