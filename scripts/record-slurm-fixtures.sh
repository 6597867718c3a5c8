#!/bin/bash
# record-slurm-fixtures.sh [OUT] -- record real Slurm 24.11 output into tests/fixtures/slurm/24.11
# (or OUT) from the live 24.11 cluster (scripts/slurm-up.sh with SLURM_SERIES=24.11).
#
# It puts the cluster in a state worth recording: both on-prem nodes busy (one job each), one
# job pending for resources, one burst node powered up (scontrol power_up; its slurmd started
# as the launcher does once Slurm ran ResumeProgram) running a job, one finished job, the other burst nodes powered down. Then it
# saves each command's output under the file name given next to the command below, and cancels
# its jobs. The cluster's JWT is never written into the outputs.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
DIR=${SLURM24_DIR:-$REPO/.slurm-24.11}
OUT=${1:-$REPO/tests/fixtures/slurm/24.11}
# shellcheck disable=SC1091
source "$DIR/env.sh"
export PATH=$SLURM_BIN_DIR:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
mkdir -p "$OUT"
node=${SLURM_CLOUD_NODES%%,*}
sub() { sbatch --parsable -o /dev/null "$@"; }

done_job=$(sub -p onprem --gres=gpu:1 -J done --wrap true)
a=$(sub -p onprem --gres=gpu:4 -J fill -A gputeam -t 30 --wrap 'sleep 300')
b=$(sub -p onprem --gres=gpu:a100:2 -J half -t 10 --wrap 'sleep 300')
c=$(sub -p onprem --gres=gpu:4 -J wait -A research -t 20 --wrap 'sleep 300')
scontrol update nodename="$node" state=power_up
# like the launcher: boot the node once Slurm has run ResumeProgram for it (POWERING_UP, '#')
wait_state() { for _ in $(seq 1 120); do sinfo -h -n "$node" -o %t | grep -q -- "$1" && return 0; sleep 0.5; done; return 1; }
wait_state '#'
env --default-signal slurmd -b -f "$SLURM_CONF" -N "$node" </dev/null
wait_state '^idle$'
d=$(sub -p cloud -w "$node" --gres=gpu:2 -J burst -A gputeam --wrap 'sleep 300')
for _ in $(seq 1 120); do   # the job on the freshly resumed node runs after the 30 s periodic pass
  [ "$(squeue -h -j "$d" -o %T)" = RUNNING ] && break; sleep 0.5
done
squeue -h -o '%i %T %R'

tok=$(cat "$SLURMRESTD_TOKEN_FILE")
rest() { curl -sf -H "X-SLURM-USER-NAME: $SLURMRESTD_USER" -H "X-SLURM-USER-TOKEN: $tok" "$SLURMRESTD_URL$1"; }
squeue --json --states=all      >"$OUT/squeue--json--states=all.json"
squeue --json                   >"$OUT/squeue--json.json"
sinfo --json                    >"$OUT/sinfo--json.json"
scontrol show nodes --json      >"$OUT/scontrol-show-nodes--json.json"
scontrol -o -d show node        >"$OUT/scontrol-o-d-show-node.txt"
sinfo --version                 >"$OUT/sinfo--version.txt"
sacct --json >"$OUT/sacct--json.txt" 2>&1 || true   # no slurmdbd: the error is the output
rest /slurm/v0.0.42/ping        >"$OUT/rest-v0.0.42-ping.json"
rest /slurm/v0.0.42/jobs        >"$OUT/rest-v0.0.42-jobs.json"
rest /slurm/v0.0.42/nodes       >"$OUT/rest-v0.0.42-nodes.json"

scancel "$done_job" "$a" "$b" "$c" "$d" 2>/dev/null || true
pid=$(cat "$DIR/run/slurmd-$node.pid" 2>/dev/null || true)
[ -n "$pid" ] && kill "$pid"
scontrol update nodename="$node" state=power_down_force reason="fixture recording done" || true
if grep -rl -- "$tok" "$OUT" >/dev/null; then echo "token leaked into $OUT" >&2; exit 1; fi
echo "recorded into $OUT: $(ls "$OUT" | tr '\n' ' ')"
