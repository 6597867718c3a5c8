#!/bin/bash
# pg-down.sh [DIR] [--purge] -- stop the private cluster scripts/pg-up.sh started for DIR (by its
# data directory, never by process name) and, as root, remove its folder outside DIR
# (/var/lib/postgresql/gpu-burst-pg-<hash of DIR>: data, socket, log; see pg-up.sh).
# --purge also removes DIR.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
DIR=${PG_DIR:-$(cd "$HERE/.." && pwd)/.pg}; PURGE=0
for a in "$@"; do case "$a" in --purge) PURGE=1 ;; *) DIR=$a ;; esac; done
BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
stop() { # stop <data dir>
  [ -n "$BIN" ] && [ -f "$1/postmaster.pid" ] || return 0
  if [ "$(id -u)" = 0 ]; then
    su postgres -s /bin/sh -c "$BIN/pg_ctl -D $1 -m fast -w stop" >/dev/null 2>&1
  else
    "$BIN/pg_ctl" -D "$1" -m fast -w stop >/dev/null 2>&1
  fi
}
if [ "$(id -u)" = 0 ]; then   # named as pg-up.sh names it; found even when DIR is gone
  S=/var/lib/postgresql/gpu-burst-pg-$(realpath -m "$DIR" | tr -d '\n' | sha1sum | cut -c1-12)
  if stop "$S/data"; then rm -rf "$S"; else echo "pg-down: could not stop $S/data; kept $S" >&2; exit 1; fi
fi
[ -d "$DIR" ] || exit 0
stop "$DIR/data"   # a non-root cluster, or one an older pg-up.sh made in DIR
[ "$PURGE" = 1 ] && rm -rf "$DIR"
exit 0
