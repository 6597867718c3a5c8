#!/bin/bash
# slurm-down.sh [DIR] [--purge] -- stop every daemon scripts/slurm-up.sh started (and any burst
# slurmd the launcher started), strictly by the pid files in DIR, never by process name.
# --purge also wipes state and logs so the next slurm-up starts a clean cluster.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
DIR=${SLURM_DIR:-$(cd "$HERE/.." && pwd)/.slurm}; PURGE=0
for a in "$@"; do case "$a" in --purge) PURGE=1 ;; *) DIR=$a ;; esac; done
[ -d "$DIR" ] || { echo "no cluster dir $DIR"; exit 0; }
DIR=$(cd "$DIR" && pwd)
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH
export SLURM_CONF=$DIR/etc/slurm.conf

running() { kill -0 "$1" 2>/dev/null && [ "$(awk '{print $3}' /proc/"$1"/stat 2>/dev/null)" != Z ]; }
stop_pidfiles() { # stop_pidfiles <expected substring of /proc/pid/cmdline> <pidfile>...
  local want=$1 pf pid; shift; local pids=()
  for pf in "$@"; do
    [ -f "$pf" ] || continue
    pid=$(cat "$pf" 2>/dev/null); rm -f "$pf"
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || continue
    tr '\0' ' ' </proc/"$pid"/cmdline 2>/dev/null | grep -q -- "$want" || continue
    kill "$pid" 2>/dev/null && pids+=("$pid")
  done
  [ ${#pids[@]} -gt 0 ] || return 0
  for _ in $(seq 1 100); do
    local left=0; for pid in "${pids[@]}"; do running "$pid" && left=1; done
    [ $left = 0 ] && break; sleep 0.1
  done
  for pid in "${pids[@]}"; do running "$pid" && kill -9 "$pid" 2>/dev/null; done
  echo "  $want (${pids[*]}) stopped"
}

if [ -f "$DIR/run/slurmctld.pid" ] && timeout 5 scontrol ping >/dev/null 2>&1; then
  jobs=$(squeue -h -o %i 2>/dev/null | tr '\n' ' ')
  if [ -n "${jobs// /}" ]; then
    # shellcheck disable=SC2086
    scancel $jobs 2>/dev/null
    for _ in $(seq 1 30); do [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.5; done
    echo "  cancelled jobs: $jobs"
  fi
fi
stop_pidfiles slurmrestd "$DIR/run/slurmrestd.pid"
stop_pidfiles slurmd     "$DIR"/run/slurmd-*.pid
stop_pidfiles slurmctld  "$DIR/run/slurmctld.pid"
stop_pidfiles munged     "$DIR/munge/munged.pid"
if [ "$PURGE" = 1 ]; then
  rm -rf "$DIR/state" "$DIR/log" "$DIR/jobs"
  echo "  purged state and logs"
fi
echo "stopped $DIR"
