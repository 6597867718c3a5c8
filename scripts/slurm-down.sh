#!/bin/bash
# slurm-down.sh [DIR] [--purge] -- stop every daemon scripts/slurm-up.sh started (and any burst
# slurmd the launcher started), strictly by the pid files in DIR, never by process name.
# --purge also wipes state and logs so the next slurm-up starts a clean cluster.
# Always removes munge's folder outside DIR (/run/gpu-burst-munge-<hash of DIR>, see slurm-up.sh;
# 24.11: inside the root), and DIR/munge where an older slurm-up kept it.
# A 24.11 cluster (DIR/root names its Debian 13 root): also stops the hook bridge, unmounts DIR
# from the root and removes the folders slurm-up made for that mount point; proc, sys and dev are
# shared by every cluster in the root and are unmounted only when no other one uses it. The root
# itself is kept for reuse.
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
# munge's folder, named as slurm-up.sh names it; seen from the host
MUNGE_DIR=$ROOT/run/gpu-burst-munge-$(realpath -m "$DIR" | tr -d '\n' | sha1sum | cut -c1-12)

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
stop_pidfiles munged     "$MUNGE_DIR/munged.pid" "$DIR/munge/munged.pid"
# its key, socket, log and seed: a fresh folder (and key) on the next slurm-up
rm -rf "$MUNGE_DIR" "$DIR/munge"
if [ -n "$ROOT" ] && [ -d "$ROOT" ]; then
  mounts_below() { awk -v r="$1" '$2 == r || index($2, r "/") == 1 {print $2}' /proc/mounts; }
  unmount_below() { # deepest first; -l when something still holds a mount busy
    local m; for m in $(mounts_below "$1" | sort -r); do
      umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || echo "  could not unmount $m"
    done; }
  unmount_below "$ROOT$DIR"
  if [ -f "$DIR/root-dirs" ]; then   # the mount point's folders slurm-up made, deepest first
    while IFS= read -r d; do
      case "$d" in "$ROOT"/?*) rmdir "$d" 2>/dev/null ;; esac   # empty ones only, never rm -r
    done <"$DIR/root-dirs"
    rm -f "$DIR/root-dirs"
  fi
  # Another cluster in this root: its DIR mounted there, or a process still rooted there.
  others=$(awk -v r="$ROOT" 'index($2, r "/") == 1 { t = substr($2, length(r) + 2); sub(/\/.*/, "", t)
                                if (t != "proc" && t != "sys" && t != "dev") n++ } END { print n + 0 }' /proc/mounts)
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/root" 2>/dev/null)" = "$ROOT" ] && others=$((others + 1))
  done
  if [ "$others" = 0 ]; then
    unmount_below "$ROOT"
    left=$(mounts_below "$ROOT" | wc -l)
    [ "$left" = 0 ] && echo "  unmounted $ROOT/{proc,sys,dev,${DIR#/}}" || echo "  $left mounts left below $ROOT"
  else
    echo "  unmounted $ROOT$DIR; kept $ROOT/{proc,sys,dev}: another cluster uses the root"
  fi
fi
if [ "$PURGE" = 1 ]; then
  rm -rf "$DIR/state" "$DIR/log" "$DIR/jobs"
  echo "  purged state and logs"
fi
echo "stopped $DIR"
