#!/bin/bash
# pg-down.sh [DIR] [--purge] -- stop the private cluster scripts/pg-up.sh started in DIR (by its
# data directory, never by process name). --purge also removes DIR.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
DIR=${PG_DIR:-$(cd "$HERE/.." && pwd)/.pg}; PURGE=0
for a in "$@"; do case "$a" in --purge) PURGE=1 ;; *) DIR=$a ;; esac; done
[ -d "$DIR" ] || exit 0
BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
if [ -n "$BIN" ] && [ -f "$DIR/data/postmaster.pid" ]; then
  if [ "$(id -u)" = 0 ]; then
    su postgres -s /bin/sh -c "$BIN/pg_ctl -D $DIR/data -m fast -w stop" >/dev/null 2>&1
  else
    "$BIN/pg_ctl" -D "$DIR/data" -m fast -w stop >/dev/null 2>&1
  fi
fi
[ "$PURGE" = 1 ] && rm -rf "$DIR"
exit 0
