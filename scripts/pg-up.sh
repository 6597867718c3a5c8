#!/bin/bash
# pg-up.sh [DIR] -- a private PostgreSQL cluster for the tests: Unix socket only (no TCP), never
# the system service. Idempotent: a cluster already running for DIR is reused. Installs Debian's
# postgresql when it is missing. Prints the SQLAlchemy URL on its last line; also writes it to
# DIR/url (DIR defaults to .pg).
#
# As root, postgres runs as the user `postgres`, which cannot enter DIR when the clone sits in a
# private (0700) folder such as /root or a `mktemp -d` one. So the data directory, socket and log
# live in postgres's own /var/lib/postgresql, in gpu-burst-pg-<hash of DIR> (one per DIR: no two
# clusters share one); DIR keeps url and initdb.log. scripts/pg-down.sh removes that folder: the
# cluster is disposable (every test makes a database of its own). Not as root, postgres runs as
# the caller, who can enter DIR: everything stays in DIR.
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
if [ "$(id -u)" = 0 ]; then
  # named as pg-down.sh names it
  S=/var/lib/postgresql/gpu-burst-pg-$(realpath -m "$DIR" | tr -d '\n' | sha1sum | cut -c1-12)
  [ -d /var/lib/postgresql ] || install -d -o postgres -g postgres -m 0755 /var/lib/postgresql
  install -d -o postgres -g postgres -m 0755 "$S"
  if [ -f "$DIR/data/PG_VERSION" ]; then
    # a cluster an older pg-up.sh made in DIR: stop it (it holds the port) and drop it
    echo "pg-up: PostgreSQL's data moved from $DIR/data to $S/data: a fresh cluster" >&2
    as_pg "$BIN/pg_ctl -D $DIR/data -m fast -w stop" >/dev/null 2>&1 || true
    rm -rf "$DIR/data" "$DIR/log"
  fi
else
  S=$DIR
fi
URL="postgresql+psycopg://postgres@/postgres?host=$S&port=$PORT"
if [ -f "$S/data/postmaster.pid" ] && as_pg "$BIN/pg_ctl -D $S/data status" >/dev/null 2>&1; then
  echo "$URL" >"$DIR/url"; echo "$URL"; exit 0
fi
if [ ! -f "$S/data/PG_VERSION" ]; then
  as_pg "$BIN/initdb -D $S/data -A trust -U postgres" >"$DIR/initdb.log" 2>&1 \
    || { cat "$DIR/initdb.log"; exit 1; }
fi

as_pg "$BIN/pg_ctl -D $S/data -o \"-k $S -p $PORT -c listen_addresses= -c max_connections=200\" -l $S/log -w -t 60 start" >/dev/null \
  || { tail -n 30 "$S/log"; exit 1; }
echo "$URL" >"$DIR/url"; echo "$URL"
