#!/usr/bin/env bash
# Repeats scripts/bench-vs-redis.sh and summarizes its first table: on a
# shared machine one run says little, since the same bench gives a third
# more or less from one hour to the next.
#
#   scripts/bench-vs-redis-runs.sh RUNS [bench-vs-redis.sh options]
#
# Each run measures Rally and then Redis, as bench-vs-redis.sh does, so the
# two sides of a ratio always come from the same minutes. Printed: every
# run's row for each client count (Rally msg/s and p99, Rally's
# publish -> ack p50 and Redis's p50, the Rally/Redis ratio), then per
# client count the min / median / max of the ratio and of Rally's ack p50
# minus Redis's p50, and in how many runs each was at or above 0.5 and at
# or below 0 ms. --no-postgres is passed unless given otherwise, since the
# table summarized is the embedded store's. The raw tables go to stderr.
set -euo pipefail
shopt -s inherit_errexit
export LC_ALL=C

me=scripts/bench-vs-redis-runs.sh
root=$(cd "$(dirname "$0")/.." && pwd)

die() {
  echo "$me: $*" >&2
  exit 1
}

[ $# -ge 1 ] || die "usage: $me RUNS [bench-vs-redis.sh options]"
runs=$1
shift
[[ $runs =~ ^[1-9][0-9]*$ ]] || die "RUNS must be a positive integer, got '$runs'"
args=("$@")
postgres_asked=0
for arg in "${args[@]}"; do
  [ "$arg" = --no-postgres ] && postgres_asked=1
done
[ "$postgres_asked" = 1 ] || args+=(--no-postgres)

rows=""
for run in $(seq "$runs"); do
  echo "$me: run $run of $runs" >&2
  table=$("$root/scripts/bench-vs-redis.sh" "${args[@]}") || die "bench-vs-redis.sh failed in run $run"
  echo "$table" >&2
  # The first table: rows "clients | Rally msg/s | p50 | p99 | ack p50 | Redis/s | p50 | p99 | ratio".
  run_rows=$(awk -v run="$run" -F'|' '
    /^Rally relay vs durable Redis/ { table = 1; next }
    table && /^ *clients *\|/ { next }
    table && NF == 9 { gsub(/ /, ""); print run, $1, $2, $4, $5, $6, $7, $9; next }
    table && NF != 9 { table = 0 }
  ' <<<"$table")
  [ -n "$run_rows" ] || die "no result rows in run $run (has bench-vs-redis.sh's table changed?)"
  rows+="$run_rows"$'\n'
done

echo
echo "$runs paired runs of scripts/bench-vs-redis.sh ${args[*]}"
printf '%4s | %7s | %11s | %12s | %13s | %12s | %12s | %11s\n' run clients "Rally msg/s" "Rally p99 ms" \
  "Rally ack p50" "Redis XADD/s" "Redis p50 ms" "Rally/Redis"
sort -k2,2n -k1,1n <<<"${rows%$'\n'}" | awk '{
  printf "%4s | %7s | %11s | %12s | %13s | %12s | %12s | %11s\n", $1, $2, $3, $4, $5, $6, $7, $8
}'
echo
printf '%7s | %23s | %11s | %30s | %11s\n' clients "Rally/Redis min/med/max" "runs >= 0.5" \
  "ack p50 - Redis p50 min/med/max" "runs <= 0"
# Column 9: Rally's ack p50 minus Redis's p50.
gapped=$(awk '{ printf "%s %.2f\n", $0, $5 - $7 }' <<<"${rows%$'\n'}")
# One summary per client count, of one column sorted: "count min median max
# runs-meeting runs".
summary() {
  local column=$1 test=$2
  sort -k2,2n -k"$column,$column"g <<<"$gapped" | awk -v c="$column" -v test="$test" '
    BEGIN { n = 0; meeting = 0 }
    function flush() {
      if (count == "") return
      med = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
      print count, v[1], med, v[n], meeting, n
      delete v; n = 0; meeting = 0
    }
    $2 != count { flush(); count = $2 }
    {
      v[++n] = $c
      if ((test == "half" && $c >= 0.5) || (test == "none" && $c <= 0)) meeting++
    }
    END { flush() }
  '
}
join <(summary 8 half | sort -k1,1) <(summary 9 none | sort -k1,1) | sort -k1,1n | awk '{
  printf "%7s | %23s | %11s | %30s | %11s\n", $1, sprintf("%.2f / %.2f / %.2f", $2, $3, $4),
    sprintf("%d of %d", $5, $6), sprintf("%+.2f / %+.2f / %+.2f ms", $7, $8, $9), sprintf("%d of %d", $10, $11)
}'
