#!/usr/bin/env bash
# Side-by-side benchmark: Rally's relay against durable Redis on the same
# machine, in one run, printed as one table.
#
#   scripts/bench-vs-redis.sh [--clients 1,10,100] [--messages 300] [--payload 256] [--no-postgres] [--cpus LIST]
#
# Rally:  `rally-bench relay` (a relay in its own process, its embedded store:
#         envelope segments, one fdatasync per batch). Each of N clients publishes M messages of P bytes;
#         a publish is acknowledged only after the relay's durable commit
#         (fsync), and each message is delivered to a subscriber. msg/s is
#         deliveries per second of wall time; latency is publish -> delivery.
#         The load comes from rally-bench's plain-socket generator (one
#         thread, frames encoded before the timed part), as redis-benchmark
#         loads Redis; a second run loads it through RallyCore's
#         RelayConnection (`--load sdk`), as an app would.
# Rally on PostgreSQL: the same bench with `--postgres` on a private cluster
#         this script starts (scripts/lib/private-postgres.sh; fsync on,
#         synchronous_commit on), with 1 node and with 3 nodes (each client
#         subscribes on one node and publishes on the next, so every message
#         crosses nodes). Skipped with --no-postgres.
# Redis:  our own redis-server on a free loopback port, in a temp directory,
#         with --appendonly yes --appendfsync always --save '' (a write is
#         acknowledged only after the AOF fsync). redis-benchmark runs
#         `XADD <key> * f <P bytes>` with N connections, N*M requests in total
#         and pipelining 1 (one request in flight per connection, like Rally's
#         publishers). Latency is request -> reply; nothing reads the stream.
#
# --cpus LIST runs both sides on the same CPUs (`taskset -c LIST` around
# redis-server, redis-benchmark, rally-bench and the relays it starts). On a
# small virtual machine one client's latency depends mostly on which CPU the
# fsyncing thread runs on: the one that takes the disk's completion
# interrupts, or another that each completion must wake with an
# inter-processor interrupt (ADR 0036). Unpinned, the scheduler decides that
# per run and per side; pinned, both sides get the same CPU.
#
# Both data directories live under ${TMPDIR:-/tmp}, so both sides fsync to
# the same filesystem. The rally-bench binary is RALLY_BENCH (default
# .build/release/rally-bench); this script never builds it. redis-server,
# redis-benchmark and redis-cli are installed with apt-get when missing
# (as root; otherwise the script says what to install and stops).
# Progress and the raw outputs of both tools go to stderr; the table to stdout.
set -euo pipefail
shopt -s inherit_errexit # command substitutions fail loudly too (bash 4.4+)
export LC_ALL=C

root=$(cd "$(dirname "$0")/.." && pwd)
me=scripts/bench-vs-redis.sh
rally_bench=${RALLY_BENCH:-$root/.build/release/rally-bench}

clients=1,10,100
messages=300
payload=256
with_postgres=1
cpus=""

die() {
  echo "$me: $*" >&2
  exit 1
}
note() { echo "$me: $*" >&2; }

usage() {
  cat <<EOF
usage: $me [--clients 1,10,100] [--messages 300] [--payload 256]
  --clients   comma-separated concurrent client counts (default 1,10,100)
  --messages  messages each client publishes (default 300); Redis gets
              clients*messages XADDs in total for each client count
  --payload   payload bytes per message (default 256; rally-bench needs >= 16)
  --no-postgres  leave out Rally on PostgreSQL (1 and 3 nodes)
  --cpus      run both sides on these CPUs only (taskset -c LIST, e.g. 0 or 0,1)
env: RALLY_BENCH  path to rally-bench (default .build/release/rally-bench)
EOF
}

while [ $# -gt 0 ]; do
  case "$1" in
    --clients | --messages | --payload | --cpus)
      [ $# -ge 2 ] || die "$1 needs a value"
      case "$1" in
        --clients) clients=$2 ;;
        --messages) messages=$2 ;;
        --payload) payload=$2 ;;
        --cpus) cpus=$2 ;;
      esac
      shift 2
      ;;
    --clients=*) clients=${1#*=} && shift ;;
    --messages=*) messages=${1#*=} && shift ;;
    --payload=*) payload=${1#*=} && shift ;;
    --cpus=*) cpus=${1#*=} && shift ;;
    --no-postgres) with_postgres=0 && shift ;;
    -h | --help) usage && exit 0 ;;
    *) usage >&2 && die "unknown argument: $1" ;;
  esac
done

is_positive_int() { [[ $1 =~ ^[1-9][0-9]*$ ]]; }
is_number() { [[ $1 =~ ^[0-9]+(\.[0-9]+)?$ ]]; }

is_positive_int "$messages" || die "--messages must be a positive integer, got '$messages'"
is_positive_int "$payload" || die "--payload must be a positive integer, got '$payload'"
[ "$payload" -ge 16 ] || die "--payload must be at least 16 (rally-bench stamps each payload), got $payload"
IFS=, read -r -a counts <<<"$clients"
[ ${#counts[@]} -gt 0 ] || die "--clients must list client counts, e.g. 1,10,100"
for count in "${counts[@]}"; do
  # rally-bench silently drops entries it cannot parse; refuse them here so
  # its rows and ours always line up.
  is_positive_int "$count" || die "--clients must be comma-separated positive integers, got '$clients'"
done

# --- prerequisites -----------------------------------------------------------

# What every process of either side runs under: nothing, or taskset.
pinned=()
if [ -n "$cpus" ]; then
  [[ $cpus =~ ^[0-9]+([,-][0-9]+)*$ ]] || die "--cpus takes a CPU list such as 0 or 0,1 or 0-3, got '$cpus'"
  command -v taskset >/dev/null 2>&1 || die "--cpus needs taskset (Debian: util-linux)"
  taskset -c "$cpus" true 2>/dev/null || die "--cpus $cpus: taskset cannot run on these CPUs (this machine has $(nproc))"
  pinned=(taskset -c "$cpus")
fi

if [ ! -x "$rally_bench" ]; then
  die "rally-bench not found at $rally_bench: run \`swift build -c release --product rally-bench\` first (or set RALLY_BENCH)"
fi

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
if ! command -v redis-benchmark >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
  missing+=(redis-tools) # Debian's package for redis-benchmark and redis-cli
fi
if [ "$with_postgres" = 1 ] && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 &&
  ! command -v initdb >/dev/null 2>&1; then
  missing+=(postgresql)
fi
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    die "needs redis-server, redis-benchmark and redis-cli (and postgresql unless --no-postgres); install them (Debian/Ubuntu: sudo apt-get install -y ${missing[*]}; macOS: brew install redis) and rerun"
  fi
  note "installing ${missing[*]} with apt-get (for redis-server, redis-benchmark, redis-cli)"
  apt-get update >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}" >&2
  note "installed ${missing[*]}; this script does not use the package's own redis service on port 6379"
fi
for tool in redis-server redis-benchmark redis-cli; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is still missing after installing ${missing[*]:-nothing}"
done

# redis-benchmark 7.0 prints p50/p99 columns in --csv (-q prints only p50); the
# parser looks the columns up by name and fails if they are missing.
redis_version=$(redis-server --version | sed -n 's/.* v=\([^ ]*\).*/\1/p')
[ -n "$redis_version" ] || die "cannot read the version from \`redis-server --version\`"

# --- our own redis-server ----------------------------------------------------

workdir=""
redis_pid=""
redis_port=""

stop_redis() {
  [ -n "$redis_pid" ] || return 0
  if kill -0 "$redis_pid" 2>/dev/null; then
    kill -TERM "$redis_pid" 2>/dev/null || true
    for _ in $(seq 100); do
      kill -0 "$redis_pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$redis_pid" 2>/dev/null; then
      echo "$me: redis-server (pid $redis_pid) ignored SIGTERM for 10 s; killing it" >&2
      kill -KILL "$redis_pid" 2>/dev/null || true
    fi
  fi
  wait "$redis_pid" 2>/dev/null || true
  redis_pid=""
}

cleanup() {
  local status=$?
  trap - EXIT INT TERM
  stop_redis
  stop_private_postgres
  [ -z "$workdir" ] || rm -rf "$workdir"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

workdir=$(mktemp -d "${TMPDIR:-/tmp}/rally-bench-vs-redis.XXXXXX")
# shellcheck source=lib/private-postgres.sh
. "$root/scripts/lib/private-postgres.sh"

# `timeout` keeps a probe from hanging on a port some other service holds.
probe() {
  if command -v timeout >/dev/null 2>&1; then
    timeout 5 redis-cli -h 127.0.0.1 -p "$1" "${@:2}" 2>/dev/null
  else
    redis-cli -h 127.0.0.1 -p "$1" "${@:2}" 2>/dev/null
  fi
}

# The pid our redis-server reports on PORT, or nothing.
server_pid_on() { probe "$1" INFO server | tr -d '\r' | sed -n 's/^process_id://p' || true; }

# Start redis-server on a random loopback port, retrying when the port is
# taken. "Ready" means the server answering on the port reports our pid, so a
# server someone else runs on that port is never mistaken for ours.
start_redis() {
  local attempt port
  for attempt in $(seq 20); do
    port=$((20000 + RANDOM % 40000))
    : >"$workdir/redis.log"
    "${pinned[@]}" redis-server --bind 127.0.0.1 --port "$port" --dir "$workdir" \
      --appendonly yes --appendfsync always --save '' \
      --daemonize no --logfile "$workdir/redis.log" &
    redis_pid=$!
    for _ in $(seq 100); do
      kill -0 "$redis_pid" 2>/dev/null || break
      if [ "$(server_pid_on "$port")" = "$redis_pid" ]; then
        redis_port=$port
        return 0
      fi
      sleep 0.1
    done
    if kill -0 "$redis_pid" 2>/dev/null; then
      cat "$workdir/redis.log" >&2
      die "redis-server (pid $redis_pid) did not answer on 127.0.0.1:$port within 10 s"
    fi
    wait "$redis_pid" 2>/dev/null || true
    redis_pid=""
    if ! grep -q 'Address already in use' "$workdir/redis.log"; then
      cat "$workdir/redis.log" >&2
      die "redis-server exited at start (log above)"
    fi
    note "port $port is taken, trying another (attempt $attempt)"
  done
  die "found no free loopback port for redis-server after 20 attempts"
}

start_redis
fsync_policy=$(probe "$redis_port" CONFIG GET appendfsync | tr -d '\r' | sed -n 2p) ||
  die "CONFIG GET appendfsync failed"
aof=$(probe "$redis_port" CONFIG GET appendonly | tr -d '\r' | sed -n 2p) || die "CONFIG GET appendonly failed"
[ "$fsync_policy" = always ] && [ "$aof" = yes ] ||
  die "redis-server is not durable as configured (appendonly=$aof appendfsync=$fsync_policy)"
note "redis-server $redis_version: pid $redis_pid on 127.0.0.1:$redis_port, dir $workdir, appendonly yes, appendfsync always, save ''"

# --- Rally -------------------------------------------------------------------

# One rally-bench relay run (extra arguments: where it keeps envelopes);
# prints its rows "clients delivered rate p50 p99 ack_p50 ack_p99", in the
# order of --clients.
rally_run() {
  local out rows
  note "running: $rally_bench relay --clients $clients --messages $messages --payload $payload $*"
  out=$("${pinned[@]}" "$rally_bench" relay --clients "$clients" --messages "$messages" --payload "$payload" "$@") ||
    die "rally-bench relay $* failed (exit $?)"
  sed 's/^/  rally-bench | /' <<<"$out" >&2
  # Rows under the header "clients  messages  seconds  deliveries/s  p50 ms  p99 ms  max ms
  # ack p50 ms  ack p99 ms ..." (CPU columns follow).
  rows=$(awk '
    /^clients +messages +seconds +deliveries\/s +p50 ms +p99 ms +max ms +ack p50 ms +ack p99 ms/ { table = 1; next }
    table && NF >= 9 && $1 ~ /^[0-9]+$/ { print $1, $2, $4, $5, $6, $8, $9; next }
    table { table = 0 }
  ' <<<"$out")
  [ "$(grep -c . <<<"$rows")" -eq ${#counts[@]} ] ||
    die "expected ${#counts[@]} result rows from rally-bench $*, parsed: $rows (output above; has its format changed?)"
  echo "$rows"
}

# Command substitutions, not process substitutions: a failed run stops the
# script (errexit, inherit_errexit).
rows=$(rally_run)
mapfile -t rally_rows <<<"$rows"
rows=$(rally_run --load sdk)
mapfile -t sdk_rows <<<"$rows"
declare -a pg1_rows=() pg3_rows=()
if [ "$with_postgres" = 1 ]; then
  start_private_postgres || die "could not start PostgreSQL (use --no-postgres to leave it out)"
  note "PostgreSQL: private cluster at $PRIVATE_POSTGRES_URL"
  # Plain text on loopback, as the figures before TLS (ADR 0023) were.
  rows=$(rally_run --postgres "$PRIVATE_POSTGRES_URL?sslmode=disable" --nodes 1)
  mapfile -t pg1_rows <<<"$rows"
  rows=$(rally_run --postgres "$PRIVATE_POSTGRES_URL?sslmode=disable" --nodes 3)
  mapfile -t pg3_rows <<<"$rows"
  stop_private_postgres
fi

# --- Redis -------------------------------------------------------------------

# One CSV run of redis-benchmark; prints "rps p50 p99".
# The payload goes in through -x (last argument read from stdin, byte-exact,
# no trailing newline added): argv cannot carry Rally's largest payloads, and
# it keeps the payload out of the CSV's test-name column. -d is not passed: it
# only sizes the values of the built-in SET/GET tests, not custom commands.
redis_run() {
  local connections=$1 total=$2 key=$3 csv row
  [ "$(server_pid_on "$redis_port")" = "$redis_pid" ] ||
    die "our redis-server (pid $redis_pid) is not answering on port $redis_port (redis-benchmark would hang)"
  csv=$(printf '%*s' "$payload" '' | tr ' ' x |
    "${pinned[@]}" redis-benchmark -h 127.0.0.1 -p "$redis_port" -c "$connections" -n "$total" -P 1 --csv -x \
      XADD "$key" '*' f) || die "redis-benchmark failed for $connections clients (exit $?)"
  sed 's/^/  redis-benchmark | /' <<<"$csv" >&2
  row=$(awk -F, '
    { gsub(/"/, "") }
    NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    NF > 1 { rows++; line = $0 }
    END {
      if (!("rps" in col) || !("p50_latency_ms" in col) || !("p99_latency_ms" in col)) { print "no rps/p50_latency_ms/p99_latency_ms columns"; exit 1 }
      if (rows != 1) { print "expected 1 result row, got " rows + 0; exit 1 }
      n = split(line, f, ",")
      print f[col["rps"]], f[col["p50_latency_ms"]], f[col["p99_latency_ms"]]
    }' <<<"$csv") || die "cannot parse redis-benchmark --csv output: $row"
  echo "$row"
}

declare -a redis_rows=()
for count in "${counts[@]}"; do
  total=$((count * messages))
  key="rally-bench-vs-redis:$count:${#redis_rows[@]}"
  note "running: redis-benchmark -h 127.0.0.1 -p $redis_port -c $count -n $total -P 1 --csv -x XADD $key '*' f (last argument: $payload bytes on stdin)"
  row=$(redis_run "$count" "$total" "$key")
  # Every request must have landed, with exactly the payload asked for.
  length=$(probe "$redis_port" XLEN "$key" | tr -d '\r') || die "XLEN $key failed"
  [ "$length" = "$total" ] || die "stream $key has $length entries after $total XADDs"
  stored=$(probe "$redis_port" EVAL "return string.len(redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)[1][2][2])" 1 "$key" | tr -d '\r') ||
    die "reading back an entry of $key failed"
  [ "$stored" = "$payload" ] || die "stream $key holds $stored-byte payloads, expected $payload"
  redis_rows+=("$row")
done
stop_redis

# --- table -------------------------------------------------------------------

echo
echo "Rally relay vs durable Redis $redis_version on this machine ($(nproc 2>/dev/null || echo '?') cores):" \
  "--clients $clients, $messages messages per client, $payload-byte payloads${cpus:+, both sides on CPUs $cpus}"
format='%7s | %11s | %12s | %12s | %12s | %12s | %12s | %12s | %11s\n'
# shellcheck disable=SC2059  # the format is the constant above
printf "$format" clients "Rally msg/s" "Rally p50 ms" "Rally p99 ms" "Rally ack p50" "Redis XADD/s" "Redis p50 ms" \
  "Redis p99 ms" "Rally/Redis"
pg_table=""
sdk_table=""
for i in "${!counts[@]}"; do
  count=${counts[$i]}
  read -r r_clients r_delivered r_rate r_p50 r_p99 r_ack50 _ <<<"${rally_rows[$i]}"
  read -r x_rate x_p50 x_p99 <<<"${redis_rows[$i]}"
  [ "$r_clients" = "$count" ] || die "rally-bench row $((i + 1)) is for $r_clients clients, expected $count"
  [ "$r_delivered" = "$((count * messages))" ] ||
    die "rally-bench delivered $r_delivered messages for $count clients, expected $((count * messages))"
  for value in "$r_rate" "$r_p50" "$r_p99" "$r_ack50" "$x_rate" "$x_p50" "$x_p99"; do
    # redis-benchmark's rps is requests / whole milliseconds: a run shorter
    # than 1 ms prints "inf".
    is_number "$value" || die "non-numeric result '$value' for $count clients (run too short? use more --messages)"
  done
  awk -v f="$format" -v c="$count" -v rr="$r_rate" -v r50="$r_p50" -v r99="$r_p99" -v ra50="$r_ack50" \
    -v xr="$x_rate" -v x50="$x_p50" -v x99="$x_p99" 'BEGIN {
      ratio = (xr > 0) ? sprintf("%.2f", rr / xr) : "n/a"
      printf f, c, sprintf("%.0f", rr), sprintf("%.2f", r50), sprintf("%.2f", r99), sprintf("%.2f", ra50),
        sprintf("%.0f", xr), sprintf("%.2f", x50), sprintf("%.2f", x99), ratio
    }'
  read -r s_clients s_delivered s_rate s_p50 s_p99 _ <<<"${sdk_rows[$i]}"
  [ "$s_clients" = "$count" ] && [ "$s_delivered" = "$((count * messages))" ] ||
    die "rally-bench --load sdk row $((i + 1)): $s_clients clients, $s_delivered delivered"
  for value in "$s_rate" "$s_p50" "$s_p99"; do
    is_number "$value" || die "non-numeric SDK-load result '$value' for $count clients"
  done
  sdk_table+=$(awk -v c="$count" -v a="$s_rate" -v b="$s_p50" -v d="$s_p99" -v xr="$x_rate" 'BEGIN {
    printf "%7s | %11s | %12s | %12s | %11s\n", c, sprintf("%.0f", a), sprintf("%.2f", b), sprintf("%.2f", d),
      (xr > 0) ? sprintf("%.2f", a / xr) : "n/a"
  }')$'\n'
  if [ "$with_postgres" = 1 ]; then
    read -r p1_clients p1_delivered p1_rate _ p1_p99 _ <<<"${pg1_rows[$i]}"
    read -r p3_clients p3_delivered p3_rate _ p3_p99 _ <<<"${pg3_rows[$i]}"
    for value in "$p1_rate" "$p1_p99" "$p3_rate" "$p3_p99"; do
      is_number "$value" || die "non-numeric PostgreSQL result '$value' for $count clients"
    done
    [ "$p1_clients" = "$count" ] && [ "$p3_clients" = "$count" ] || die "PostgreSQL rows out of order"
    [ "$p1_delivered" = "$((count * messages))" ] && [ "$p3_delivered" = "$((count * messages))" ] ||
      die "rally-bench on PostgreSQL delivered $p1_delivered / $p3_delivered messages for $count clients"
    pg_table+=$(awk -v c="$count" -v a="$p1_rate" -v b="$p1_p99" -v d="$p3_rate" -v e="$p3_p99" -v xr="$x_rate" 'BEGIN {
      printf "%7s | %14s | %13s | %15s | %14s | %11s | %11s\n", c, sprintf("%.0f", a), sprintf("%.2f", b),
        sprintf("%.0f", d), sprintf("%.2f", e), (xr > 0) ? sprintf("%.2f", a / xr) : "n/a",
        (xr > 0) ? sprintf("%.2f", d / xr) : "n/a"
    }')$'\n'
  fi
done
echo
echo "Rally loaded through RallyCore's RelayConnection (--load sdk; its clients share the machine's cores):"
printf '%7s | %11s | %12s | %12s | %11s\n' clients "Rally msg/s" "Rally p50 ms" "Rally p99 ms" "Rally/Redis"
printf '%s' "$sdk_table"
if [ "$with_postgres" = 1 ]; then
  echo
  echo "Rally on PostgreSQL (private cluster, fsync on), same clients, messages and payload:"
  printf '%7s | %14s | %13s | %15s | %14s | %11s | %11s\n' clients "1 node msg/s" "1 node p99 ms" \
    "3 nodes msg/s" "3 nodes p99 ms" "1 node/Redis" "3 nodes/Redis"
  printf '%s' "$pg_table"
fi
cat <<EOF

What each side measures (not the same work; read the ratio with this in mind):
  Rally: publish -> delivery to a subscriber through the relay; each publish acknowledged
         after the relay's envelope segment is synced (pwrite + fdatasync). msg/s = deliveries
         per second of wall time; p50/p99 = publish -> subscriber receipt; ack p50 =
         publish -> acknowledgement (what redis-benchmark times for XADD). Each client uses
         two WebSocket connections (publisher + subscriber) and sends a topic access proof
         per publish; the bench's payloads are opaque bytes (it does not encrypt them).
         The first table's load comes from one thread on plain sockets with every frame
         encoded beforehand (as redis-benchmark prepares its commands); the second's from
         RallyCore's RelayConnection, which costs the shared cores about 3x more per message.
  Redis: XADD acknowledged after fsync (appendonly yes, appendfsync always); no delivery to
         any reader. XADD/s = redis-benchmark requests per second; p50/p99 = request -> reply.
         One connection per client, pipelining 1.
  Rally/Redis = Rally msg/s divided by Redis XADD/s (above 1: Rally faster).
EOF
