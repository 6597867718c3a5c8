# debian-root-lib.sh -- sourced by slurm-root.sh and test-host-root.sh, which both debootstrap
# a Debian root into the checkout: the mirror apt already uses, and the mounts below a folder
# (a root with live mounts is never removed).

mirror() { # the Debian mirror apt already uses (deb822 sources or one-line sources.list)
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk '/^URIs:/ {print $2}' "$f"
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    awk '$1 == "deb" {for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) {print $i; break}}' "$f"
  done
}

mounted_below() { awk -v r="$1" '$2 == r || index($2, r "/") == 1 {print $2}' /proc/mounts; }

# debootstrap_tmp SUITE PACKAGES ROOT: a minbase SUITE root with PACKAGES in ROOT.tmp (the
# caller adds its own files, its stamp, then moves it over ROOT). Uses the caller's log and die.
debootstrap_tmp() {
  local suite=$1 packages=$2 root=$3 mirror_url
  mirror_url=${DEBIAN_MIRROR:-$(mirror | grep -v -- '-security' | head -1)}
  [ -n "$mirror_url" ] || die "no Debian mirror in apt's sources; set DEBIAN_MIRROR"
  TMP=$root.tmp
  [ -z "$(mounted_below "$TMP")" ] || die "$TMP has mounts; refusing to remove it"
  rm -rf "$TMP"
  log "debootstrap $suite from $mirror_url into $root (about 75 s)"
  debootstrap --variant=minbase --include="$packages" "$suite" "$TMP" "$mirror_url" >"$TMP.log" 2>&1 \
    || { tail -5 "$TMP.log"; die "debootstrap failed ($TMP.log)"; }
  # only packages and their config: drop the apt cache to keep the folder small
  rm -rf "$TMP"/var/cache/apt/archives/*.deb
}
