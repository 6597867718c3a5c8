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
