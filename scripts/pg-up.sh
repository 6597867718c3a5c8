#!/bin/bash
# pg-up.sh [DIR] -- a private PostgreSQL cluster for the tests: data directory, socket and log
# under DIR (default .pg), Unix socket only (no TCP), never the system service. Idempotent:
# a cluster already running from DIR is reused. Installs Debian's postgresql when it is missing.
# Prints the SQLAlchemy URL on its last line; also writes it to DIR/url.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
DIR=${1:-${PG_DIR:-$(cd "$HERE/.." && pwd)/.pg}}
PORT=${PG_PORT:-55432}
mkdir -p "$DIR"; DIR=$(cd "$DIR" && pwd)
bin_dir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }
if [ -z "$(bin_dir)" ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get install -y postgresql || { apt-get update && apt-get install -y postgresql; }
  else
    sudo apt-get install -y postgresql
  fi
fi
BIN=$(bin_dir)
# initdb and postgres refuse to run as root: run them as the postgres user on a directory it owns
as_pg() {
  if [ "$(id -u)" = 0 ]; then su postgres -s /bin/sh -c "$*"; else sh -c "$*"; fi
}
[ "$(id -u)" = 0 ] && chown postgres:postgres "$DIR"
URL="postgresql+psycopg://postgres@/postgres?host=$DIR&port=$PORT"
if [ -f "$DIR/data/postmaster.pid" ] && as_pg "$BIN/pg_ctl -D $DIR/data status" >/dev/null 2>&1; then
  echo "$URL" >"$DIR/url"; echo "$URL"; exit 0
fi
if [ ! -f "$DIR/data/PG_VERSION" ]; then
  as_pg "$BIN/initdb -D $DIR/data -A trust -U postgres" >"$DIR/initdb.log" 2>&1 \
    || { cat "$DIR/initdb.log"; exit 1; }
fi

as_pg "$BIN/pg_ctl -D $DIR/data -o \"-k $DIR -p $PORT -c listen_addresses= -c max_connections=200\" -l $DIR/log -w -t 60 start" >/dev/null \
  || { tail -n 30 "$DIR/log"; exit 1; }
echo "$URL" >"$DIR/url"; echo "$URL"
