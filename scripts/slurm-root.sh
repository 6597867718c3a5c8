#!/bin/bash
# slurm-root.sh ROOT -- build (once) the Debian 13 "trixie" root that holds Slurm 24.11 for the
# second test cluster (see ../shared/notes/slurm.md, "Slurm 24.11 on the same host").
#
# Installing trixie's Slurm into the Debian 12 host would pull a newer libc, so the daemons run in
# a separate root made by debootstrap. The root is kept (e.g. <repo>/.slurm-roots/trixie) and
# reused while its stamp matches the suite and package list below; a changed list rebuilds it.
# Building takes ~75 s and ~285 MB. debootstrap is installed with apt-get when missing.
#
# Env: DEBIAN_MIRROR (default: the first Debian mirror in apt's sources), INSTALL=1 (0 = never
# call apt-get).
set -euo pipefail
ROOT=${1:?usage: slurm-root.sh ROOT}
SUITE=trixie
PACKAGES=slurmctld,slurmd,slurm-client,munge,slurmrestd,slurm-wlm-jwt-plugin
STAMP_TEXT="suite=$SUITE variant=minbase include=$PACKAGES"
INSTALL=${INSTALL:-1}
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH
# shellcheck source=debian-root-lib.sh
. "$(dirname "$0")/debian-root-lib.sh"
log() { printf '[slurm-root] %s\n' "$*"; }
die() { log "ERROR: $*"; exit 1; }

mkdir -p "$(dirname "$ROOT")"
ROOT=$(cd "$(dirname "$ROOT")" && pwd)/$(basename "$ROOT")
STAMP=$ROOT/.provisioner-root
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$STAMP_TEXT" ] && { [ -L "$ROOT/usr/sbin/slurmctld" ] || [ -x "$ROOT/usr/sbin/slurmctld" ]; }; then  # an absolute link into the root
  exit 0   # built and unchanged: reuse
fi

[ -z "$(mounted_below "$ROOT")" ] \
  || die "$ROOT has mounts ($(mounted_below "$ROOT" | tr '\n' ' ')); run make slurm-down first"

if ! command -v debootstrap >/dev/null; then
  [ "$INSTALL" = 1 ] || die "debootstrap is missing"
  log "installing debootstrap"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update >/dev/null 2>&1 || log "apt-get update failed; using cached lists"
  apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends debootstrap >/dev/null \
    || die "apt-get install debootstrap failed"
fi

t0=$(date +%s)
debootstrap_tmp "$SUITE" "$PACKAGES" "$ROOT"
echo "$STAMP_TEXT" >"$TMP/.provisioner-root"
rm -rf "$ROOT"
mv "$TMP" "$ROOT"
rm -f "$TMP.log"
log "built in $(( $(date +%s) - t0 )) s: $(chroot "$ROOT" slurmctld -V)"
