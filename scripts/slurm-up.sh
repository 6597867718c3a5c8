#!/bin/bash
# slurm-up.sh [DIR] -- idempotently bring up one of the project's real single-host Slurm clusters
# for tests and demos. Adapted from ../shared/notes/slurm/start-cluster.sh.
#
#   SLURM_SERIES=22.05 (default): Debian 12's packages on this host.
#   SLURM_SERIES=24.11: Debian 13's packages in a debootstrap root (scripts/slurm-root.sh, kept in
#     SLURM_ROOT, default <repo>/.slurm-roots/trixie). Every daemon and command runs there through
#     `chroot`; DIR is bind-mounted at the same path inside the root, so configs, pid files, logs
#     and job output have one path on both sides. DIR/slurm-bin holds one wrapper per Slurm
#     command (`squeue` -> `chroot ROOT /usr/bin/squeue`) for the host's tools. slurmrestd listens
#     on 127.0.0.1 with JWT (AuthAltTypes=auth/jwt); the token is written to DIR/etc/jwt.token.
#     The power-saving hooks run inside the root, where the project's Python is not: they hand
#     the hostlist over loopback TCP (bash /dev/tcp) to scripts/slurm_hook_bridge.py on the host,
#     which runs `provisioner slurm resume|suspend|resume-fail` there (HOOK_MODE=bridge).
#
#   * munged + slurmctld + one slurmd per on-prem node (2 nodes x 4 fake A100 GPUs: gres.conf
#     File= symlinks to /dev/null), optional slurmrestd on a unix socket;
#   * State=CLOUD burst nodes (Weight higher than on-prem, Features cloud,aws,<region>,spot,<GPU type>) in
#     partition "cloud"; a job submitted to `-p onprem,cloud` may land there;
#   * Resume/Suspend/ResumeFailProgram are DIR/bin wrappers that hand the hostlist to
#     `provisioner slurm resume|suspend|resume-fail` (Slurm-driven mode). Nothing here boots a
#     node: the provisioner's same-host stand-in (provisioner/register/same_host_stand_in.py) starts the burst
#     node's slurmd, playing the cloud VM. HOOK_MODE=autojoin makes the wrappers start slurmd
#     themselves instead (manual use without the Python package).
#
# Must run as root. Everything lives in DIR (default <repo>/.slurm) except munge's state: munged
# runs as the user `munge`, which cannot enter DIR when the clone sits in a private (0700) folder
# such as /root or a `mktemp -d` one, so its key, socket, pid, log and seed live in
# /run/gpu-burst-munge-<hash of DIR> (24.11: that path inside the root, whose own /root is 0700).
# slurm-down.sh removes it. Re-running is a no-op when the cluster is up and the config
# unchanged. Writes DIR/env.sh (`export K=V` lines).
#
# Tunables (env), defaults sized for fast tests:
#   N_ONPREM=2 ONPREM_GPUS=4 N_CLOUD=4 CLOUD_GPUS=8 CLOUD_PREFIX=cloud-aws
#   ONPREM_MIG=TYPE:COUNT  each on-prem node also has COUNT MIG devices of GRES type TYPE (e.g.
#              1g.10gb:7, one GPU's slices), fake device files like its GPUs (docs/slurm.md)
#   ONPREM_SHARDS=N  each on-prem node also has N shards (Slurm's GPU-sharing GRES) over its GPUs
#   CLOUD_FEATURES=cloud,aws,us-east-1,spot,GPU_TYPE CLOUD_WEIGHT=100 ONPREM_WEIGHT=1
#   ONPREM_FEATURES=onprem  the on-prem nodes' features (e.g. onprem,a100,1g.10gb: a GPU class
#              a job's constraint may name)
#   NODE_CPUS=2 NODE_MEM=1000 GPU_TYPE=a100
#   SUSPEND_TIME=10 SUSPEND_TIMEOUT=5 RESUME_TIMEOUT=45 SLURMD_TIMEOUT=60
#   PORT_BASE=6817 (ctld=+0, slurmd port=+1, slurmrestd (24.11)=+3, hook bridge (24.11)=+4,
#                   on-prem slurmds=+10.., cloud slurmds=+40..)
#   WITH_REST=1    slurmrestd (22.05: unix:DIR/run/slurmrestd.sock; 24.11: 127.0.0.1:PORT_BASE+3)
#   HOOK_MODE=provisioner|bridge|autojoin|log   PROVISIONER=<repo>/.venv/bin/provisioner
#   INSTALL=1      0 = never call apt-get
#   BURST_NODES=local  the burst nodes' slurmd runs on this host (the same-host stand-in, a stand-in);
#              hosts: each burst node is a test host of its own on the tests' /24
#              (provisioner/testing/hosts.py), joining as a cloud VM does. Then slurmctld listens
#              on CTLD_ADDR only (CommunicationParameters=NoCtldInAddrAny), the config is served to
#              slurmd (enable_configless), burst nodes share SlurmdPort and Debian's slurmd paths,
#              their GPUs are /dev/nvidia* on the node (a test host links them to /dev/null), the
#              controller sets NodeAddr (no cloud_reg_addrs) and slurmd reports the truth (no
#              config_overrides). N_ONPREM may be 0.
#   CTLD_ADDR=127.0.0.1  slurmctld's address (BURST_NODES=hosts: the host's address on the /24)
#   MUNGE_KEY_FROM=<file>  use this key (a test host root's own, "baked into the image")
#   CLOUD_REG_ADDRS=0  BURST_NODES=hosts: 1 = slurmctld takes NodeAddr from registrations too
#              (the mode the controller does not use: its tests show what goes wrong)
set -euo pipefail
T_START=$(date +%s%N)
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
SLURM_SERIES=${SLURM_SERIES:-22.05}
case "$SLURM_SERIES" in
  22.05) DIR=${1:-${SLURM_DIR:-$REPO/.slurm}} ;;
  24.11) DIR=${1:-${SLURM24_DIR:-$REPO/.slurm-24.11}}; SLURM_ROOT=${SLURM_ROOT:-$REPO/.slurm-roots/trixie} ;;
  *) echo "slurm-up: SLURM_SERIES=$SLURM_SERIES is not one of 22.05, 24.11" >&2; exit 2 ;;
esac
mkdir -p "$DIR"; DIR=$(cd "$DIR" && pwd)

N_ONPREM=${N_ONPREM:-2};   ONPREM_GPUS=${ONPREM_GPUS:-4}
N_CLOUD=${N_CLOUD:-4};     CLOUD_GPUS=${CLOUD_GPUS:-8}; CLOUD_PREFIX=${CLOUD_PREFIX:-cloud-aws}
CLOUD_FEATURES=${CLOUD_FEATURES:-cloud,aws,us-east-1,spot,${GPU_TYPE:-a100}}  # as render_node_lines: the GPU class last
ONPREM_FEATURES=${ONPREM_FEATURES:-onprem}
CLOUD_WEIGHT=${CLOUD_WEIGHT:-100}; ONPREM_WEIGHT=${ONPREM_WEIGHT:-1}
NODE_CPUS=${NODE_CPUS:-2}; NODE_MEM=${NODE_MEM:-1000};  GPU_TYPE=${GPU_TYPE:-a100}
SUSPEND_TIME=${SUSPEND_TIME:-10}; SUSPEND_TIMEOUT=${SUSPEND_TIMEOUT:-5}
# A burst node's slurmd has RESUME_TIMEOUT to register after Slurm powers it up: the
# controller's next pass binds an instance and the launcher starts the slurmd. On a loaded
# 2-core machine that took over 15 s, the node failed, and Slurm held the requeued jobs back
# for about two minutes, past the e2e test's deadline.
RESUME_TIMEOUT=${RESUME_TIMEOUT:-45}; SLURMD_TIMEOUT=${SLURMD_TIMEOUT:-60}
PORT_BASE=${PORT_BASE:-6817}
WITH_REST=${WITH_REST:-1}; INSTALL=${INSTALL:-1}
PROVISIONER=${PROVISIONER:-$REPO/.venv/bin/provisioner}
BURST_NODES=${BURST_NODES:-local}; CTLD_ADDR=${CTLD_ADDR:-127.0.0.1}; MUNGE_KEY_FROM=${MUNGE_KEY_FROM:-}
case "$BURST_NODES" in local|hosts) ;; *) echo "slurm-up: BURST_NODES=$BURST_NODES is not local or hosts" >&2; exit 2 ;; esac
# on-prem slurmds on this host would share the burst nodes' Debian paths
[ "$BURST_NODES" = local ] || [ "$N_ONPREM" = 0 ] || { echo "slurm-up: BURST_NODES=hosts needs N_ONPREM=0" >&2; exit 2; }
if [ -z "${HOOK_MODE:-}" ]; then
  if [ ! -x "$PROVISIONER" ]; then HOOK_MODE=autojoin
  elif [ "$SLURM_SERIES" = 24.11 ]; then HOOK_MODE=bridge
  else HOOK_MODE=provisioner; fi
fi
CTLD_PORT=$PORT_BASE; SLURMD_PORT=$((PORT_BASE+1))
REST_PORT=$((PORT_BASE+3)); BRIDGE_PORT=$((PORT_BASE+4))
SYSPATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH=$SYSPATH:$PATH
export SLURM_CONF=$DIR/etc/slurm.conf

secs_since() { local d=$(( ($(date +%s%N) - $1) / 10000000 )); printf '%d.%02d' $((d/100)) $((d%100)); }
log() { printf '[slurm-up %6ss] %s\n' "$(secs_since "$T_START")" "$*"; }
die() { log "ERROR: $*"; exit 1; }
[ "$(id -u)" = 0 ] || die "must run as root"
alive() { [ -f "$1" ] && kill -0 "$(cat "$1" 2>/dev/null)" 2>/dev/null \
          && [ "$(awk '{print $3}' "/proc/$(cat "$1")/stat" 2>/dev/null)" != Z ]; }
wait_for() { # wait_for <timeout_s> <cmd...>
  local t=$1; shift; local end=$(( $(date +%s) + t ))
  until "$@" >/dev/null 2>&1; do [ "$(date +%s)" -ge "$end" ] && return 1; sleep 0.2; done; }
# munge's folder as the daemons see it (slurm-down.sh derives the same name): one per cluster DIR
MUNGE_RUN=/run/gpu-burst-munge-$(realpath -m "$DIR" | tr -d '\n' | sha1sum | cut -c1-12)

# ---------------------------------------------------------------- 1. packages
need=()
if [ "$SLURM_SERIES" = 22.05 ]; then
  for c in slurmctld slurmd munged sinfo; do command -v $c >/dev/null || need+=(slurm-wlm munge); done
  [ "$WITH_REST" = 1 ] && { command -v slurmrestd >/dev/null || need+=(slurmrestd); }
fi
[ "$WITH_REST" = 1 ] && { command -v curl >/dev/null || need+=(curl); }
if [ ${#need[@]} -gt 0 ]; then
  [ "$INSTALL" = 1 ] || die "missing packages: ${need[*]}"
  pkgs=$(printf '%s\n' "${need[@]}" | sort -u | tr '\n' ' ')
  log "installing: $pkgs"
  t0=$(date +%s%N)
  export DEBIAN_FRONTEND=noninteractive
  # shellcheck disable=SC2086
  apt-get -o DPkg::Lock::Timeout=600 update >"$DIR/apt.log" 2>&1 || log "apt-get update failed; trying the cached lists"
  apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends $pkgs >>"$DIR/apt.log" 2>&1 \
    || die "apt-get install failed ($DIR/apt.log)"
  log "installed in $(secs_since "$t0")s"
fi

# ---------------------------------------------------------------- 1a. munge's old place
# A cluster started before munge moved out of DIR: stop it whole (slurm-down.sh also removes
# DIR/munge), so that no daemon keeps talking to the old socket; it restarts below.
if [ -d "$DIR/munge" ]; then
  log "munge moved from $DIR/munge to $MUNGE_RUN: stopping the cluster once"
  bash "$HERE/slurm-down.sh" "$DIR" | sed 's/^/  /'
  [ ! -d "$DIR/munge" ] || die "could not retire $DIR/munge (scripts/slurm-down.sh $DIR)"
fi

# ---------------------------------------------------------------- 1b. the 24.11 root
SLURM_BIN_DIR=
if [ "$SLURM_SERIES" = 24.11 ]; then
  INSTALL=$INSTALL bash "$HERE/slurm-root.sh" "$SLURM_ROOT" || die "no Slurm 24.11 root"
  SLURM_ROOT=$(cd "$SLURM_ROOT" && pwd -P)  # as /proc/PID/root shows it (slurm-down.sh)
  echo "$SLURM_ROOT" >"$DIR/root"   # slurm-down.sh unmounts what is below it
  mnt() { # mnt <what> <where below ROOT> <mount args...>: mount once
    local at=$SLURM_ROOT$2; mkdir -p "$at"
    mountpoint -q "$at" || mount "${@:3}" "$1" "$at" || die "mount $1 at $at failed"; }
  mnt proc /proc -t proc
  mnt /sys /sys --rbind          # slurmd 24.11 needs the cgroup filesystem
  mnt /dev /dev --rbind
  # slaves: unmounting them later must never propagate back to the host's /sys and /dev
  mount --make-rslave "$SLURM_ROOT/sys" 2>/dev/null || true
  mount --make-rslave "$SLURM_ROOT/dev" 2>/dev/null || true
  # the cluster folder at the same path on both sides; the folders made for its mount point
  # are noted (deepest first) for slurm-down.sh to remove
  made=(); d=$SLURM_ROOT$DIR
  while [ ! -e "$d" ]; do made+=("$d"); d=$(dirname "$d"); done
  [ ${#made[@]} = 0 ] || printf '%s\n' "${made[@]}" >>"$DIR/root-dirs"
  mnt "$DIR" "$DIR" --bind
  cp /etc/hosts "$SLURM_ROOT/etc/hosts"   # else every client retries getaddrinfo
  SLURM_BIN_DIR=$DIR/slurm-bin; mkdir -p "$SLURM_BIN_DIR"
  for c in /usr/bin/{squeue,sinfo,scontrol,sbatch,scancel,sacct,srun,salloc,sprio,sshare} \
           /usr/sbin/{slurmctld,slurmd,slurmrestd}; do
    printf '#!/bin/sh\n# generated by scripts/slurm-up.sh: Slurm 24.11 from the Debian 13 root\nexec /usr/sbin/chroot %s %s "$@"\n' \
      "$SLURM_ROOT" "$c" >"$SLURM_BIN_DIR/$(basename "$c")"
    chmod 0755 "$SLURM_BIN_DIR/$(basename "$c")"
  done
  export PATH=$SLURM_BIN_DIR:$PATH
  INROOT=(/usr/sbin/chroot "$SLURM_ROOT")
  log "Slurm $(slurmctld -V) in $SLURM_ROOT"
else
  INROOT=()
fi
M=$MUNGE_RUN; MH=$M   # munge's folder as munged sees it (M), and from the host (MH)
if [ "$SLURM_SERIES" = 24.11 ]; then MH=$SLURM_ROOT$M; fi

# ---------------------------------------------------------------- 2. layout + key
mkdir -p "$DIR"/{etc,state/ctld,state/provisioner,log,run,bin,dev,jobs}
# munge's uid differs between the host and the root: chown inside the root that runs munged.
# The key only has to match between the daemons of this cluster, which share this one munged:
# a fresh one after slurm-down.sh removed the folder is fine.
"${INROOT[@]}" install -d -o munge -g munge -m 0755 "$M"   # socket dir must be o+x
if [ -n "$MUNGE_KEY_FROM" ] && ! cmp -s "$MUNGE_KEY_FROM" "$MH/munge.key"; then
  # a running munged keeps the old key: stop it, it restarts below with this one
  alive "$MH/munged.pid" && kill "$(cat "$MH/munged.pid")" && sleep 0.5
  install -m 0400 "$MUNGE_KEY_FROM" "$MH/munge.key"
fi
[ -s "$MH/munge.key" ] || (umask 077; dd if=/dev/urandom of="$MH/munge.key" bs=1024 count=1 status=none)
"${INROOT[@]}" chown munge:munge "$M/munge.key"; chmod 0400 "$MH/munge.key"
if [ "$SLURM_SERIES" = 24.11 ]; then   # JWT signing key for `scontrol token` and slurmrestd
  [ -s "$DIR/etc/jwt_hs256.key" ] || dd if=/dev/urandom of="$DIR/etc/jwt_hs256.key" bs=32 count=1 status=none
  chmod 0600 "$DIR/etc/jwt_hs256.key"
fi
maxg=$(( ONPREM_GPUS > CLOUD_GPUS ? ONPREM_GPUS : CLOUD_GPUS ))
for ((i=0;i<maxg;i++)); do ln -sfn /dev/null "$DIR/dev/nvidia$i"; done
ONPREM_MIG=${ONPREM_MIG:-}; ONPREM_SHARDS=${ONPREM_SHARDS:-0}
MIG_TYPE=${ONPREM_MIG%%:*}; MIG_COUNT=0; [ -n "$ONPREM_MIG" ] && MIG_COUNT=${ONPREM_MIG##*:}
# Slurm wants one device file per GRES device; a MIG device's own files are NVIDIA's
# /dev/nvidia-caps/*, which Slurm only passes on (MultipleFiles=), so a link stands in for each.
for ((i=0;i<MIG_COUNT;i++)); do ln -sfn /dev/null "$DIR/dev/nvidia-mig$i"; done
ONPREM_GRES="gpu:$GPU_TYPE:$ONPREM_GPUS"
[ "$MIG_COUNT" -gt 0 ] && ONPREM_GRES+=",gpu:$MIG_TYPE:$MIG_COUNT"
[ "$ONPREM_SHARDS" -gt 0 ] && ONPREM_GRES+=",shard:$ONPREM_SHARDS"
GRES_TYPES=gpu; [ "$ONPREM_SHARDS" -gt 0 ] && GRES_TYPES=gpu,shard

ONPREM_NODES=(); CLOUD_NODES=()
for ((i=1;i<=N_ONPREM;i++)); do ONPREM_NODES+=("onprem-$i"); done
for ((i=1;i<=N_CLOUD;i++));  do CLOUD_NODES+=("$CLOUD_PREFIX-$i"); done
for n in "${ONPREM_NODES[@]}" "${CLOUD_NODES[@]}"; do mkdir -p "$DIR/state/d-$n"; done
HOST=$(hostname -s)
CTLD_RUN=()
if [ "$BURST_NODES" = hosts ]; then
  # slurmctld binds the address its own name resolves to (NoCtldInAddrAny), and it must be
  # the host SlurmctldHost names: it runs as host gbt-ctl (a UTS namespace) with a private
  # /etc/hosts (a mount namespace) naming CTLD_ADDR. The machine's own files are untouched.
  CTLD_NAME=gbt-ctl; CTLD_HOST="$CTLD_NAME($CTLD_ADDR)"; AUTH_ALT=""
  printf '127.0.0.1 localhost\n%s %s\n' "$CTLD_ADDR" "$CTLD_NAME" >"$DIR/etc/hosts.ctld"
  hosts_at=/etc/hosts; [ "$SLURM_SERIES" = 24.11 ] && hosts_at=$SLURM_ROOT/etc/hosts
  CTLD_RUN=(unshare --uts --mount --propagation private sh -c
    "hostname $CTLD_NAME && mount --bind $DIR/etc/hosts.ctld $hosts_at && exec \"\$0\" \"\$@\"")
elif [ "$SLURM_SERIES" = 24.11 ]; then
  CTLD_HOST="$HOST(127.0.0.1)"   # 24.11 wants its own host name here
  AUTH_ALT="AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$DIR/etc/jwt_hs256.key"
else
  CTLD_HOST="localhost(127.0.0.1)"; AUTH_ALT=""
fi
if [ "$BURST_NODES" = hosts ]; then
  SLURMD_PATHS="SlurmdSpoolDir=/var/spool/slurmd
SlurmdPidFile=/run/slurmd.pid
SlurmdLogFile=/var/log/slurm/slurmd.log"
  SLURMD_PARAMS=""; COMM_PARAMS=NoAddrCache,NoCtldInAddrAny
  CTLD_PARAMS=enable_configless,idle_on_node_suspend,power_save_interval=1
  [ "${CLOUD_REG_ADDRS:-0}" = 1 ] && CTLD_PARAMS=$CTLD_PARAMS,cloud_reg_addrs
else
  SLURMD_PATHS="SlurmdSpoolDir=$DIR/state/d-%n
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmdLogFile=$DIR/log/slurmd-%n.log"
  SLURMD_PARAMS="SlurmdParameters=config_overrides"; COMM_PARAMS=NoAddrCache
  CTLD_PARAMS=idle_on_node_suspend,cloud_reg_addrs,power_save_interval=1
fi

# ---------------------------------------------------------------- 3. configs
CHANGED=0
write_if_changed() { # write_if_changed <file>  (content on stdin)
  local tmp; tmp=$(mktemp); cat >"$tmp"
  if ! cmp -s "$tmp" "$1"; then mv "$tmp" "$1"; chmod 0644 "$1"; CHANGED=1; else rm -f "$tmp"; fi; }
gen_slurm_conf() {
cat <<EOF
# generated by scripts/slurm-up.sh
ClusterName=burst
SlurmctldHost=$CTLD_HOST
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$M/munge.sock
$AUTH_ALT
StateSaveLocation=$DIR/state/ctld
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
$SLURMD_PATHS
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
GresTypes=$GRES_TYPES
ReturnToService=2
SlurmdTimeout=$SLURMD_TIMEOUT
$SLURMD_PARAMS
# cloud bursting (power saving)
SlurmctldParameters=$CTLD_PARAMS
PrivateData=cloud
SrunPortRange=${SRUN_PORT_RANGE:-60001-63000}
TreeWidth=65533
CommunicationParameters=$COMM_PARAMS
SuspendProgram=$DIR/bin/suspend.sh
ResumeProgram=$DIR/bin/resume.sh
ResumeFailProgram=$DIR/bin/resumefail.sh
SuspendTime=$SUSPEND_TIME
SuspendTimeout=$SUSPEND_TIMEOUT
ResumeTimeout=$RESUME_TIMEOUT
$( [ "$N_ONPREM" -gt 0 ] && echo SuspendExcParts=onprem )
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/log/jobcomp.txt
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
EOF
echo "# on-prem nodes: one slurmd per NodeName on this host, told apart by Port"
local p=$((PORT_BASE+10)) n
for n in "${ONPREM_NODES[@]}"; do
  echo "NodeName=$n NodeAddr=127.0.0.1 NodeHostname=$HOST Port=$p CPUs=$NODE_CPUS RealMemory=$NODE_MEM Gres=$ONPREM_GRES Feature=$ONPREM_FEATURES Weight=$ONPREM_WEIGHT State=UNKNOWN"
  p=$((p+1)); done
echo "# burst nodes (same shape as provisioner.register.slurm_conf renders, plus a Port each)"
p=$((PORT_BASE+40))
for n in "${CLOUD_NODES[@]}"; do
  port="Port=$p "; [ "$BURST_NODES" = hosts ] && port=""   # a host of its own: SlurmdPort
  echo "NodeName=$n ${port}CPUs=$NODE_CPUS RealMemory=$NODE_MEM Gres=gpu:$GPU_TYPE:$CLOUD_GPUS Feature=$CLOUD_FEATURES Weight=$CLOUD_WEIGHT State=CLOUD"
  p=$((p+1)); done
[ "$N_ONPREM" -gt 0 ] && echo "PartitionName=onprem Nodes=$(IFS=,; echo "${ONPREM_NODES[*]}") Default=YES MaxTime=INFINITE State=UP"
cloud_default=""; [ "$N_ONPREM" -gt 0 ] || cloud_default="Default=YES "
[ "$N_CLOUD" -gt 0 ] && echo "PartitionName=cloud Nodes=$(IFS=,; echo "${CLOUD_NODES[*]}") ${cloud_default}MaxTime=INFINITE State=UP"
return 0
}
write_if_changed "$DIR/etc/slurm.conf" < <(gen_slurm_conf)

gen_gres_conf() {
echo "AutoDetect=off"
local n
for n in "${ONPREM_NODES[@]}"; do
  echo "NodeName=$n Name=gpu Type=$GPU_TYPE File=$DIR/dev/nvidia[0-$((ONPREM_GPUS-1))]"
  [ "$MIG_COUNT" -gt 0 ] && echo "NodeName=$n Name=gpu Type=$MIG_TYPE File=$DIR/dev/nvidia-mig[0-$((MIG_COUNT-1))]"
  [ "$ONPREM_SHARDS" -gt 0 ] && echo "NodeName=$n Name=shard Count=$ONPREM_SHARDS File=$DIR/dev/nvidia[0-$((ONPREM_GPUS-1))]"
done
for n in "${CLOUD_NODES[@]}";  do
  if [ "$BURST_NODES" = hosts ]; then echo "NodeName=$n Name=gpu Type=$GPU_TYPE File=/dev/nvidia[0-$((CLOUD_GPUS-1))]"
  else echo "NodeName=$n Name=gpu Type=$GPU_TYPE File=$DIR/dev/nvidia[0-$((CLOUD_GPUS-1))]"; fi
done
}
write_if_changed "$DIR/etc/gres.conf" < <(gen_gres_conf)

# Resume/Suspend/ResumeFailProgram wrappers. slurmscriptd runs them with no PATH and most
# signals blocked; they must return quickly.
write_hook() { # write_hook <file> <provisioner verb> <log word>
  write_if_changed "$1" <<EOF
#!/bin/bash
# generated by scripts/slurm-up.sh: Slurm calls this with a hostlist, e.g. "cloud-aws-[1-3]".
export PATH=$SYSPATH SLURM_CONF=$SLURM_CONF
echo "\$(date +%FT%T) $3 \$1 mode=$HOOK_MODE" >> "$DIR/log/power.log"
case "$HOOK_MODE" in
  provisioner) exec "$PROVISIONER" slurm $2 --state-dir "$DIR/state/provisioner" "\$1" \\
                 >> "$DIR/log/power.log" 2>&1 ;;
  autojoin) exec "$DIR/bin/autojoin.sh" $2 "\$1" >> "$DIR/log/power.log" 2>&1 ;;
  bridge) # in the 24.11 root: the host's hook bridge runs \`provisioner slurm $2\` there
    if exec 3<>/dev/tcp/127.0.0.1/$BRIDGE_PORT; then
      printf '%s %s\\n' $2 "\$1" >&3
      IFS= read -r -t 30 reply <&3 || reply="no answer from the hook bridge"
      echo "bridge: \$reply" >> "$DIR/log/power.log"
      [ "\${reply%% *}" = ok ]; exit \$?
    fi
    echo "bridge: nothing listens on 127.0.0.1:$BRIDGE_PORT" >> "$DIR/log/power.log"; exit 1 ;;
esac
exit 0
EOF
  chmod 0755 "$1"
}
write_hook "$DIR/bin/resume.sh" resume RESUME
write_hook "$DIR/bin/suspend.sh" suspend SUSPEND
write_hook "$DIR/bin/resumefail.sh" resume-fail RESUMEFAIL
# autojoin: the hooks themselves start/stop the node's slurmd (no provisioner involved).
write_if_changed "$DIR/bin/autojoin.sh" <<EOF
#!/bin/bash
export PATH=$SYSPATH SLURM_CONF=$SLURM_CONF
verb=\$1; nodes=\$(scontrol show hostnames "\$2")
for node in \$nodes; do
  pf="$DIR/run/slurmd-\$node.pid"
  case "\$verb" in
    resume) [ -f "\$pf" ] && kill -0 "\$(cat "\$pf")" 2>/dev/null && continue
            env --default-signal slurmd -b -f "\$SLURM_CONF" -N "\$node" </dev/null ;;
    suspend) pid=\$(cat "\$pf" 2>/dev/null) && [ -n "\$pid" ] && kill "\$pid" 2>/dev/null ;;
  esac
done
exit 0
EOF
chmod 0755 "$DIR/bin/autojoin.sh"
touch "$DIR/log/power.log"

cat >"$DIR/env.sh.new" <<EOF
export SLURM_DIR=$DIR
export SLURM_CONF=$SLURM_CONF
export PROVISIONER_STATE_DIR=$DIR/state/provisioner
export SLURM_ONPREM_NODES=$(IFS=,; echo "${ONPREM_NODES[*]}")
export SLURM_CLOUD_NODES=$(IFS=,; echo "${CLOUD_NODES[*]}")
export SLURM_SUSPEND_TIME=$SUSPEND_TIME
export SLURM_SUSPEND_TIMEOUT=$SUSPEND_TIMEOUT
export SLURM_RESUME_TIMEOUT=$RESUME_TIMEOUT
export SLURM_SERIES=$SLURM_SERIES
EOF
if [ "$SLURM_SERIES" = 24.11 ]; then
  rest_url=""; [ "$WITH_REST" = 1 ] && rest_url="http://127.0.0.1:$REST_PORT"
  cat >>"$DIR/env.sh.new" <<EOF
export SLURM_ROOT=$SLURM_ROOT
export SLURM_BIN_DIR=$SLURM_BIN_DIR
export PROVISIONER_SLURM_BIN_DIR=$SLURM_BIN_DIR
export SLURMRESTD_URL=$rest_url
export SLURMRESTD_TOKEN_FILE=$DIR/etc/jwt.token
export SLURMRESTD_USER=root
export SLURMRESTD_SOCKET=
EOF
else
  cat >>"$DIR/env.sh.new" <<EOF
export SLURMRESTD_SOCKET=$( [ "$WITH_REST" = 1 ] && echo "$DIR/run/slurmrestd.sock" )
EOF
fi
write_if_changed "$DIR/env.sh" <"$DIR/env.sh.new"; rm -f "$DIR/env.sh.new"
log "configs in $DIR/etc (changed=$CHANGED, hooks=$HOOK_MODE)"

# ---------------------------------------------------------------- 4. daemons
if ! alive "$MH/munged.pid"; then
  "${INROOT[@]}" runuser -u munge -- munged --socket="$M/munge.sock" --key-file="$M/munge.key" \
    --pid-file="$M/munged.pid" --log-file="$M/munged.log" --seed-file="$M/munged.seed"
  wait_for 10 bash -c "${INROOT[*]} munge -S '$M/munge.sock' -n | ${INROOT[*]} unmunge -S '$M/munge.sock'" \
    || die "munged not answering ($MH/munged.log)"
  log "munged started"
fi

RECONF=0
if alive "$DIR/run/slurmctld.pid" && [ "$CHANGED" = 1 ]; then
  # node/partition changes are not reconfigurable in 22.05: restart slurmctld (jobs are kept).
  pid=$(cat "$DIR/run/slurmctld.pid"); kill "$pid"
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  log "configs changed -> restarting slurmctld"; RECONF=1
fi
if ! alive "$DIR/run/slurmctld.pid"; then
  setsid "${CTLD_RUN[@]}" "$(command -v slurmctld)" -f "$SLURM_CONF" </dev/null >/dev/null 2>&1
  wait_for 30 scontrol ping || die "slurmctld not answering ($DIR/log/slurmctld.log)"
  log "slurmctld started"
fi
for n in "${ONPREM_NODES[@]}"; do
  alive "$DIR/run/slurmd-$n.pid" || setsid slurmd -f "$SLURM_CONF" -N "$n" </dev/null >/dev/null 2>&1
done
[ "$RECONF" = 1 ] && scontrol reconfigure
# Saved state may claim a CLOUD node is powered up although its slurmd is gone: power it down.
for n in "${CLOUD_NODES[@]}"; do
  alive "$DIR/run/slurmd-$n.pid" && continue
  st=$(sinfo -h -n "$n" -o '%t' 2>/dev/null || true)
  case "$st" in *'~'*|*'%'*|'') ;; *)
    scontrol update nodename="$n" state=power_down_force reason="slurm-up: no slurmd" \
      && log "forced stale cloud node $n ($st) to power down" ;; esac
done

# Up = registered and usable: idle, or busy with jobs (mix, alloc, comp). Waiting for idle made
# a re-run fail while the cluster was merely running jobs.
all_up() { local s; s=$(sinfo -h -p onprem -o '%t' 2>/dev/null | sort -u) || return 1
  [ -n "$s" ] && ! grep -qvE '^(idle|mix|alloc|comp)$' <<<"$s"; }
[ "$N_ONPREM" = 0 ] || wait_for 60 all_up || { sinfo -N || true; die "on-prem nodes not up (idle, mix or alloc) after 60s"; }

if [ "$SLURM_SERIES" = 24.11 ] && [ "$HOOK_MODE" = bridge ] && ! alive "$DIR/run/hook-bridge.pid"; then
  # the hooks in the root reach the host's `provisioner slurm ...` through this listener
  setsid "$(dirname "$PROVISIONER")/python" "$HERE/slurm_hook_bridge.py" --port "$BRIDGE_PORT" \
    --provisioner "$PROVISIONER" --state-dir "$DIR/state/provisioner" --pid-file "$DIR/run/hook-bridge.pid" \
    </dev/null >>"$DIR/log/hook-bridge.log" 2>&1 &
  wait_for 15 test -s "$DIR/run/hook-bridge.pid" || die "hook bridge not listening ($DIR/log/hook-bridge.log)"
  log "hook bridge on 127.0.0.1:$BRIDGE_PORT"
fi
if [ "$SLURM_SERIES" = 24.11 ] && [ "$WITH_REST" = 1 ]; then
  # a fresh token each run (lifespan one day); slurmrestd passes it on to slurmctld (auth/jwt)
  tok=$(scontrol token username=root lifespan=86400 2>>"$DIR/log/slurmctld.log" | sed -n 's/^SLURM_JWT=//p')
  [ -n "$tok" ] || die "scontrol token failed (AuthAltTypes=auth/jwt; $DIR/log/slurmctld.log)"
  (umask 077; printf '%s\n' "$tok" >"$DIR/etc/jwt.token")
  if ! alive "$DIR/run/slurmrestd.pid"; then
    # SLURM_JWT=daemon: slurmrestd takes auth/jwt (AuthAltTypes) for the tokens it passes on
    SLURM_JWT=daemon SLURMRESTD_SECURITY=disable_user_check setsid slurmrestd -f "$SLURM_CONF" -a rest_auth/jwt \
      -s openapi/slurmctld "127.0.0.1:$REST_PORT" </dev/null >"$DIR/log/slurmrestd.log" 2>&1 &
    echo $! > "$DIR/run/slurmrestd.pid"
  fi
  rest_ping() { curl -sf -H "X-SLURM-USER-NAME: root" -H "X-SLURM-USER-TOKEN: $tok" \
                  "http://127.0.0.1:$REST_PORT/slurm/v0.0.42/ping"; }
  wait_for 15 rest_ping || die "slurmrestd not answering ($DIR/log/slurmrestd.log)"
  log "slurmrestd on http://127.0.0.1:$REST_PORT (JWT in $DIR/etc/jwt.token)"
elif [ "$WITH_REST" = 1 ] && ! alive "$DIR/run/slurmrestd.pid"; then
  rm -f "$DIR/run/slurmrestd.sock"
  SLURMRESTD_SECURITY=disable_user_check setsid slurmrestd -f "$SLURM_CONF" -a rest_auth/local \
    -s openapi/v0.0.38 "unix:$DIR/run/slurmrestd.sock" </dev/null >"$DIR/log/slurmrestd.log" 2>&1 &
  echo $! > "$DIR/run/slurmrestd.pid"
  wait_for 15 curl -sf --unix-socket "$DIR/run/slurmrestd.sock" http://localhost/slurm/v0.0.38/ping \
    || die "slurmrestd not answering ($DIR/log/slurmrestd.log)"
  log "slurmrestd on unix:$DIR/run/slurmrestd.sock"
fi
log "READY in $(secs_since "$T_START")s -> source $DIR/env.sh"
