# Sourced by scripts/test.sh and scripts/bench-vs-redis.sh: a private
# PostgreSQL cluster for one run, on a free loopback port with trust auth on
# 127.0.0.1 only, in a temporary directory, owned by the postgres user when
# run as root (the server refuses to run as root).
#
#   start_private_postgres   starts it and sets PRIVATE_POSTGRES_URL
#                            (postgres://rally@127.0.0.1:<port>/postgres)
#
# With openssl, the server also speaks TLS, with a certificate for the name
# localhost (not for the address 127.0.0.1) from a CA made for the run, and it has a
# second superuser, rally_tls, that may connect over TLS only:
#   PRIVATE_POSTGRES_CA        the CA's certificate (PEM)
#   PRIVATE_POSTGRES_OTHER_CA  a CA that signed nothing the server holds
#   PRIVATE_POSTGRES_TLS_USER  rally_tls
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
  local options="-p $port -k $private_postgres_root -c listen_addresses=127.0.0.1 -c max_connections=300"
  PRIVATE_POSTGRES_CA=
  PRIVATE_POSTGRES_OTHER_CA=
  PRIVATE_POSTGRES_TLS_USER=
  if command -v openssl >/dev/null 2>&1 && private_postgres_tls "$private_postgres_root/tls"; then
    options="$options -c ssl=on -c ssl_cert_file=$private_postgres_root/tls/server.crt"
    options="$options -c ssl_key_file=$private_postgres_root/tls/server.key"
    # rally_tls may not connect without TLS; everyone else as before.
    { echo "hostnossl all rally_tls 0.0.0.0/0 reject"; cat "$private_postgres_root/data/pg_hba.conf"; } \
      >"$private_postgres_root/pg_hba.conf"
    private_postgres_as_owner cp "$private_postgres_root/pg_hba.conf" "$private_postgres_root/data/pg_hba.conf"
  fi
  if ! private_postgres_as_owner "$private_postgres_bin/pg_ctl" -D "$private_postgres_root/data" \
    -l "$private_postgres_root/server.log" -w -t 60 -o "$options" start >/dev/null; then
    cat "$private_postgres_root/server.log" >&2
    echo "PostgreSQL did not start" >&2
    return 1
  fi
  PRIVATE_POSTGRES_URL="postgres://rally@127.0.0.1:$port/postgres"
  if [ -f "$private_postgres_root/tls/ca.crt" ]; then
    "$private_postgres_bin/createuser" -h 127.0.0.1 -p "$port" -U rally --superuser rally_tls
    PRIVATE_POSTGRES_CA="$private_postgres_root/tls/ca.crt"
    PRIVATE_POSTGRES_OTHER_CA="$private_postgres_root/tls/other-ca.crt"
    PRIVATE_POSTGRES_TLS_USER=rally_tls
  fi
}

# A CA for the run, a server certificate it signs for the name localhost only, and
# an unrelated CA; the key owned by the server's user, mode 0600.
private_postgres_tls() {
  local dir=$1
  mkdir -p "$dir"
  local ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
  openssl req -x509 "${ec[@]}" -days 2 -subj "/CN=Rally test CA" -keyout "$dir/ca.key" -out "$dir/ca.crt" \
    >/dev/null 2>&1 &&
    openssl req -x509 "${ec[@]}" -days 2 -subj "/CN=Unrelated CA" -keyout "$dir/other-ca.key" \
      -out "$dir/other-ca.crt" >/dev/null 2>&1 &&
    openssl req "${ec[@]}" -subj "/CN=localhost" -keyout "$dir/server.key" -out "$dir/server.csr" >/dev/null 2>&1 &&
    printf 'subjectAltName=DNS:localhost\n' >"$dir/san.ext" &&
    openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial -days 2 \
      -extfile "$dir/san.ext" -out "$dir/server.crt" >/dev/null 2>&1 || return 1
  chmod 600 "$dir/server.key"
  if [ "$(id -u)" = "0" ]; then chown -R postgres "$dir"; fi
}

stop_private_postgres() {
  [ -n "${private_postgres_root:-}" ] || return 0
  private_postgres_as_owner "$private_postgres_bin/pg_ctl" -D "$private_postgres_root/data" -m immediate stop \
    >/dev/null 2>&1 || true
  rm -rf "$private_postgres_root"
  private_postgres_root=
}
