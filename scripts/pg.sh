#!/usr/bin/env bash
# A throw-away PostgreSQL cluster, for the tests (the store's suite runs against
# it as well as SQLite) and `hugetune bench store`: Debian's postgresql package
# (/usr/lib/postgresql/*/bin), initdb into a new temporary directory as the
# postgres user (initdb refuses root), the server on a free port with its Unix
# socket in that directory and no TCP listener (nobody else can reach it; trust
# authentication is safe there), stopped and removed at the end, also on failure.
#
#   scripts/pg.sh run [--durable] -- CMD ARGS
#        starts a cluster, runs CMD with HUGETUNE_TEST_PG=its URL, then stops and
#        removes it (on CMD's failure, Ctrl-C and TERM too); exits with CMD's status
#   scripts/pg.sh start [--durable] [--owner PID]
#        starts one and prints its URL, then its directory; with --owner, a watchdog
#        stops and removes it when process PID ends (however it ends)
#   scripts/pg.sh stop DIR
#        stops and removes a cluster `start` made
#
#   --ssl CERTDIR (run, start): TLS too, with CERTDIR/server.crt and server.key
#        (the tests make a self-signed pair): the server also listens on
#        127.0.0.1 (TLS only, password authentication: a random password in
#        the URL), and the URL is that TCP one
#
# Tests run with fsync off (a crashed server is not what they test; it keeps
# CREATE DATABASE fast); --durable keeps PostgreSQL's defaults (benchmarks).
# The URL names the database `postgres`; tests create their own in it.
set -euo pipefail

die() { echo "pg.sh: $*" >&2; exit 1; }

bindir() {
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
  [ -n "$d" ] && [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] ||
    die "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb): run scripts/setup.sh"
  echo "$d"
}

# initdb and the server refuse to run as root: as root they run as postgres.
as_owner() {
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || die "no postgres user (the postgresql package makes it): run scripts/setup.sh"
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

free_port() {
  local p
  for _ in $(seq 1 200); do
    p=$((20000 + RANDOM % 40000))
    # Free on TCP too, though the server listens only on its socket.
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "$p"
      return
    fi
  done
  die "no free port found"
}

stop_cluster() {
  local dir=$1 bin
  [ -d "$dir" ] || return 0
  bin=$(bindir)
  if [ -f "$dir/data/postmaster.pid" ]; then
    as_owner "$bin/pg_ctl" -D "$dir/data" -m immediate -w -t 30 stop >/dev/null 2>&1 || true
  fi
  rm -rf "$dir"
}

# Starts a cluster; sets DIR and URL.
start_cluster() {
  local durable=$1 ssl=${2:-} bin port opts password=""
  bin=$(bindir)
  DIR=$(mktemp -d /tmp/hugetune-pg.XXXXXX)
  chmod 0700 "$DIR"
  [ "$(id -u)" = 0 ] && chown postgres: "$DIR"
  local initdb_opts=(-U postgres --auth=trust -E UTF8 --locale=C -N)
  if [ -n "$ssl" ]; then
    [ -f "$ssl/server.crt" ] && [ -f "$ssl/server.key" ] || die "--ssl $ssl: no server.crt and server.key there"
    password=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
    printf '%s\n' "$password" >"$DIR/pw"
    [ "$(id -u)" = 0 ] && chown postgres: "$DIR/pw"
    initdb_opts+=(--pwfile="$DIR/pw")
  fi
  if ! as_owner "$bin/initdb" -D "$DIR/data" "${initdb_opts[@]}" >"$DIR/initdb.log" 2>&1; then
    cat "$DIR/initdb.log" >&2
    rm -rf "$DIR"
    die "initdb failed"
  fi
  port=$(free_port)
  opts="-p $port -k $DIR -c listen_addresses= -c max_connections=200"
  [ "$durable" = 0 ] && opts="$opts -c fsync=off -c full_page_writes=off -c synchronous_commit=off"
  if [ -n "$ssl" ]; then
    rm -f "$DIR/pw"
    install -m 0600 "$ssl/server.crt" "$DIR/data/server.crt"
    install -m 0600 "$ssl/server.key" "$DIR/data/server.key"
    [ "$(id -u)" = 0 ] && chown postgres: "$DIR/data/server.crt" "$DIR/data/server.key"
    # TCP: TLS only, with the password; the socket stays trusted.
    printf 'local all all trust\nhostssl all all 127.0.0.1/32 scram-sha-256\n' >"$DIR/data/pg_hba.conf"
    [ "$(id -u)" = 0 ] && chown postgres: "$DIR/data/pg_hba.conf"
    opts="$opts -c listen_addresses=127.0.0.1 -c ssl=on"
  fi
  # setsid: a Ctrl-C to the terminal's process group does not reach the server
  # before the trap stops it in order.
  if ! as_owner setsid "$bin/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w -t 60 -o "$opts" start \
    >/dev/null 2>&1; then
    cat "$DIR/server.log" >&2 || true
    stop_cluster "$DIR"
    die "the server did not start"
  fi
  if [ -n "$ssl" ]; then
    URL="postgresql://postgres:$password@localhost:$port/postgres"
  else
    URL="postgresql://postgres@${DIR//\//%2F}:$port/postgres"
  fi
}

cmd=${1:-}
[ -n "$cmd" ] || die "usage: pg.sh run [--durable] -- CMD | start [--durable] [--owner PID] | stop DIR"
shift
durable=0
owner=""
ssl=""
case "$cmd" in
  run)
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do
      case "$1" in
        --durable) durable=1 ;;
        --ssl) ssl=${2:?--ssl needs a directory}; shift ;;
        *) die "run: unknown option $1" ;;
      esac
      shift
    done
    [ "${1:-}" = "--" ] && shift
    [ $# -gt 0 ] || die "run: give the command after --"
    DIR=""
    trap 'stop_cluster "$DIR"' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    start_cluster "$durable" "$ssl"
    echo "pg.sh: PostgreSQL at $URL" >&2
    status=0
    HUGETUNE_TEST_PG="$URL" "$@" || status=$?
    exit "$status"
    ;;
  start)
    while [ $# -gt 0 ]; do
      case "$1" in
        --durable) durable=1 ;;
        --owner) owner=${2:?--owner needs a PID}; shift ;;
        --ssl) ssl=${2:?--ssl needs a directory}; shift ;;
        *) die "start: unknown option $1" ;;
      esac
      shift
    done
    start_cluster "$durable" "$ssl"
    if [ -n "$owner" ]; then
      # The watchdog: in its own session, deaf to the terminal, its output
      # nowhere (whoever reads ours must see end of file when we exit).
      setsid bash -c '
        while kill -0 "$1" 2>/dev/null; do sleep 1; done
        exec "$2" stop "$3"' watchdog "$owner" "$0" "$DIR" </dev/null >/dev/null 2>&1 &
    fi
    echo "$URL"
    echo "$DIR"
    ;;
  stop)
    [ $# -eq 1 ] || die "stop: give the directory start printed"
    case "$1" in
      /tmp/hugetune-pg.*) stop_cluster "$1" ;;
      *) die "stop: $1 is not a cluster directory of pg.sh" ;;
    esac
    ;;
  *) die "unknown command $cmd (run, start or stop)" ;;
esac
