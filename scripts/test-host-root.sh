#!/bin/bash
# test-host-root.sh ROOT SUITE -- build (once) the Debian root that e2e tests boot as a burst VM
# of its own (systemd-nspawn, its own network namespace, real cloud-init from a NoCloud seed; see
# ../shared/notes/test-hosts.md). SUITE: bookworm (Debian 12, Slurm 22.05) or trixie (Debian 13,
# Slurm 24.11), matching the controller it joins.
#
# The root is kept (e.g. <repo>/.slurm-roots/host-bookworm) and reused while its stamp matches
# the suite and package list below; a changed list rebuilds it. Hosts boot it with
# --volatile=overlay, so their writes never reach it. Building takes ~80 s and ~400 MB.
# debootstrap and systemd-container are installed with apt-get when missing.
#
# Env: DEBIAN_MIRROR (default: the first Debian mirror in apt's sources), INSTALL=1 (0 = never
# call apt-get).
set -euo pipefail
ROOT=${1:?usage: test-host-root.sh ROOT SUITE}
SUITE=${2:?usage: test-host-root.sh ROOT SUITE}
case "$SUITE" in bookworm|trixie) ;; *) echo "test-host-root: SUITE must be bookworm or trixie" >&2; exit 2;; esac
# python3-cffi-backend must be named: debootstrap does not resolve the virtual package that
# python3-cryptography (a cloud-init dependency) needs. python3-venv: the GPU agent's venv.
PACKAGES=systemd,systemd-sysv,dbus,iproute2,python3-cffi-backend,python3-venv,cloud-init,munge,slurmd,procps
STAMP_TEXT="suite=$SUITE variant=minbase include=$PACKAGES"
INSTALL=${INSTALL:-1}
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH
# shellcheck source=debian-root-lib.sh
. "$(dirname "$0")/debian-root-lib.sh"
log() { printf '[test-host-root] %s\n' "$*"; }
die() { log "ERROR: $*"; exit 1; }

need() { # command package
  command -v "$1" >/dev/null && return 0
  [ "$INSTALL" = 1 ] || die "$1 is missing (package $2)"
  log "installing $2"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends "$2" >/dev/null 2>&1 || {
    apt-get -o DPkg::Lock::Timeout=600 update >/dev/null 2>&1 || log "apt-get update failed"
    apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends "$2" >/dev/null \
      || die "apt-get install $2 failed"
  }
}
need systemd-nspawn systemd-container

mkdir -p "$(dirname "$ROOT")"
ROOT=$(cd "$(dirname "$ROOT")" && pwd)/$(basename "$ROOT")
STAMP=$ROOT/.provisioner-root
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$STAMP_TEXT" ] && [ -e "$ROOT/usr/sbin/slurmd" ]; then
  exit 0   # built and unchanged: reuse
fi
need debootstrap debootstrap

[ -z "$(mounted_below "$ROOT")" ] || die "$ROOT has mounts; stop its test hosts first"

t0=$(date +%s)
debootstrap_tmp "$SUITE" "$PACKAGES" "$ROOT"
# A booted host must not wait for a network that its namespace already has, nor try the
# machine's own cloud datasources: NoCloud from the seed only. The locale module needs locales.
cat >"$TMP/etc/cloud/cloud.cfg.d/90-test-host.cfg" <<'CFG'
datasource_list: [ NoCloud, None ]
locale: false
CFG
# munged and slurmd start when the bootstrap has written their key and configuration, not at boot.
chroot "$TMP" systemctl disable munge.service slurmd.service >/dev/null 2>&1 || true
echo "$STAMP_TEXT" >"$TMP/.provisioner-root"
rm -rf "$ROOT"
mv "$TMP" "$ROOT"
rm -f "$TMP.log"
log "built in $(( $(date +%s) - t0 )) s: $(chroot "$ROOT" slurmd -V)"
