# Sourced by scripts/test.sh and scripts/bench-vs-redis.sh: a private
# PostgreSQL cluster for one run, on a free loopback port with trust auth on
# 127.0.0.1 only, in a temporary directory, owned by the postgres user when
# run as root (the server refuses to run as root).
#
#   start_private_postgres   starts it and sets PRIVATE_POSTGRES_URL
#                            (postgres://rally@127.0.0.1:<port>/postgres)
#   stop_private_postgres    stops it and removes its directory
#
# Needs PostgreSQL's server binaries (Debian: postgresql); the caller
# installs them.

private_postgres_as_owner() {
  if [ "$(id -u)" = "0" ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

start_private_postgres() {
  private_postgres_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
  [ -n "$private_postgres_bin" ] ||
    private_postgres_bin=$(dirname "$(command -v initdb 2>/dev/null || echo /nonexistent/initdb)")
  if [ ! -x "$private_postgres_bin/initdb" ]; then
    echo "PostgreSQL's initdb was not found (install postgresql)" >&2
    return 1
  fi
  private_postgres_root=$(mktemp -d "${TMPDIR:-/tmp}/rally-pg.XXXXXX")
  if [ "$(id -u)" = "0" ]; then chown postgres "$private_postgres_root"; fi
  local port
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  if ! private_postgres_as_owner "$private_postgres_bin/initdb" -D "$private_postgres_root/data" -U rally \
    --auth=trust -E UTF8 >"$private_postgres_root/initdb.log" 2>&1; then
    cat "$private_postgres_root/initdb.log" >&2
    echo "initdb failed" >&2
    return 1
  fi
  if ! private_postgres_as_owner "$private_postgres_bin/pg_ctl" -D "$private_postgres_root/data" \
    -l "$private_postgres_root/server.log" -w -t 60 \
    -o "-p $port -k $private_postgres_root -c listen_addresses=127.0.0.1 -c max_connections=300" start >/dev/null; then
    cat "$private_postgres_root/server.log" >&2
    echo "PostgreSQL did not start" >&2
    return 1
  fi
  PRIVATE_POSTGRES_URL="postgres://rally@127.0.0.1:$port/postgres"
}

stop_private_postgres() {
  [ -n "${private_postgres_root:-}" ] || return 0
  private_postgres_as_owner "$private_postgres_bin/pg_ctl" -D "$private_postgres_root/data" -m immediate stop \
    >/dev/null 2>&1 || true
  rm -rf "$private_postgres_root"
  private_postgres_root=
}
