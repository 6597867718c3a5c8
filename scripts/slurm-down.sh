#!/bin/bash
# slurm-down.sh [DIR] [--purge] -- stop every daemon scripts/slurm-up.sh started (and any burst
# slurmd the launcher started), strictly by the pid files in DIR, never by process name.
# --purge also wipes state and logs so the next slurm-up starts a clean cluster.
# A 24.11 cluster (DIR/root names its Debian 13 root): also stops the hook bridge, then unmounts
# what slurm-up mounted below the root (proc, sys, dev, DIR); the root itself is kept for reuse.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
DIR=${SLURM_DIR:-$(cd "$HERE/.." && pwd)/.slurm}; PURGE=0
for a in "$@"; do case "$a" in --purge) PURGE=1 ;; *) DIR=$a ;; esac; done
[ -d "$DIR" ] || { echo "no cluster dir $DIR"; exit 0; }
DIR=$(cd "$DIR" && pwd)
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH
export SLURM_CONF=$DIR/etc/slurm.conf
ROOT=$(cat "$DIR/root" 2>/dev/null || true)
[ -n "$ROOT" ] && [ -d "$DIR/slurm-bin" ] && export PATH=$DIR/slurm-bin:$PATH   # commands run in ROOT

running() { kill -0 "$1" 2>/dev/null && [ "$(awk '{print $3}' /proc/"$1"/stat 2>/dev/null)" != Z ]; }
stop_pidfiles() { # stop_pidfiles <expected substring of /proc/pid/cmdline> <pidfile>...
  local want=$1 pf pid; shift; local pids=()
  for pf in "$@"; do
    [ -f "$pf" ] || continue
    pid=$(cat "$pf" 2>/dev/null); rm -f "$pf"
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || continue
    tr '\0' ' ' </proc/"$pid"/cmdline 2>/dev/null | grep -q -- "$want" || continue
    # a daemon of the 24.11 cluster must also live in its root
    if [ -n "$ROOT" ] && [ "$want" != slurm_hook_bridge ]; then
      [ "$(readlink /proc/"$pid"/root)" = "$ROOT" ] || continue
    fi
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
stop_pidfiles slurm_hook_bridge "$DIR/run/hook-bridge.pid"
stop_pidfiles slurmrestd "$DIR/run/slurmrestd.pid"
stop_pidfiles slurmd     "$DIR"/run/slurmd-*.pid
stop_pidfiles slurmctld  "$DIR/run/slurmctld.pid"
stop_pidfiles munged     "$DIR/munge/munged.pid"
if [ -n "$ROOT" ] && [ -d "$ROOT" ]; then
  # deepest first; -l when something still holds a mount busy
  for m in $(awk -v r="$ROOT" '$2 == r || index($2, r "/") == 1 {print $2}' /proc/mounts | sort -r); do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || echo "  could not unmount $m"
  done
  left=$(awk -v r="$ROOT" 'index($2, r "/") == 1' /proc/mounts | wc -l)
  [ "$left" = 0 ] && echo "  unmounted $ROOT/{proc,sys,dev,${DIR#/}}" || echo "  $left mounts left below $ROOT"
fi
if [ "$PURGE" = 1 ]; then
  rm -rf "$DIR/state" "$DIR/log" "$DIR/jobs"
  echo "  purged state and logs"
fi
echo "stopped $DIR"
