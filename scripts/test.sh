#!/usr/bin/env bash
# The test command (the README's and CI's): installs what the build and the
# tests need when it is missing, then runs `swift test` with any extra
# arguments (e.g. `scripts/test.sh --filter LocalStore`) and exits with its
# status.
#
# Needed on Debian/Ubuntu: zlib1g-dev (CompressNIO builds against the system
# zlib) and libsqlite3-dev (the build) and zbar-tools (`zbarimg`, the real QR
# decoder the QR tests read codes with); for the browser call client's
# tests nodejs (`node --test` on its modules and the shared vector files),
# and chromium, chromium-driver and python3-selenium (two headless Chromium
# pages in a call through a real relay); postgresql (the relay store's
# conformance suite and several relay nodes on one database: the script
# starts a private cluster on a free loopback port for the run and removes
# it afterwards) and openssl (a CA and a certificate for that cluster's TLS).
# As root they are installed with apt-get; otherwise the script names the
# packages to install and stops before running anything.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
case "$(uname -s)" in
  Linux)
    [ -f /usr/include/zlib.h ] || missing+=(zlib1g-dev)
    [ -f /usr/include/sqlite3.h ] || missing+=(libsqlite3-dev)
    command -v zbarimg >/dev/null 2>&1 || missing+=(zbar-tools)
    command -v node >/dev/null 2>&1 || missing+=(nodejs)
    [ -x /usr/bin/chromium ] || missing+=(chromium)
    [ -x /usr/bin/chromedriver ] || missing+=(chromium-driver)
    /usr/bin/python3 -c 'import selenium' >/dev/null 2>&1 || missing+=(python3-selenium)
    ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
    command -v openssl >/dev/null 2>&1 || missing+=(openssl)
    if [ ${#missing[@]} -gt 0 ]; then
      if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
        echo "scripts/test.sh: installing ${missing[*]}" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
      else
        echo "scripts/test.sh: the tests need these packages, which are missing: ${missing[*]}" >&2
        echo "scripts/test.sh: install them, e.g.: sudo apt-get install -y ${missing[*]}" >&2
        exit 1
      fi
    fi
    ;;
  Darwin)
    if ! command -v zbarimg >/dev/null 2>&1; then
      echo "scripts/test.sh: the QR tests need zbarimg, which is missing: brew install zbar" >&2
      exit 1
    fi
    if ! command -v node >/dev/null 2>&1; then
      echo "scripts/test.sh: the browser client's tests need Node.js, which is missing: brew install node" >&2
      exit 1
    fi
    ;;
esac

# PostgreSQL: a private cluster for this run (scripts/lib/private-postgres.sh).
# The tests read its URL from RALLY_TEST_POSTGRES_URL and make a database of
# their own in it.
. scripts/lib/private-postgres.sh
start_private_postgres || {
  echo "scripts/test.sh: could not start PostgreSQL for the tests" >&2
  exit 1
}
trap stop_private_postgres EXIT
export RALLY_TEST_POSTGRES_URL="$PRIVATE_POSTGRES_URL"
export RALLY_TEST_POSTGRES_CA="$PRIVATE_POSTGRES_CA"
export RALLY_TEST_POSTGRES_OTHER_CA="$PRIVATE_POSTGRES_OTHER_CA"
export RALLY_TEST_POSTGRES_TLS_USER="$PRIVATE_POSTGRES_TLS_USER"

# Everything the tests start carries this marker in its environment, so a
# process a failed or crashed test left running is found and ended when the
# run is over: left alone, an orphan that inherited this script's output
# would keep whatever reads it (CI's tee) waiting forever.
export RALLY_TEST_RUN="rally-test-$$-$(date +%s%N)"
end_leftovers() {
  local environ pid
  for environ in /proc/[0-9]*/environ; do
    pid=${environ#/proc/}
    pid=${pid%/environ}
    [ "$pid" != "$$" ] || continue
    if grep -qzx "RALLY_TEST_RUN=$RALLY_TEST_RUN" "$environ" 2>/dev/null; then
      echo "scripts/test.sh: ending a process the tests left running: $pid $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" >&2
      kill -9 "$pid" 2>/dev/null || true
    fi
  done
}
trap 'end_leftovers; stop_private_postgres' EXIT

# The build first, without a time limit (a first build takes minutes); then
# the tests, which take about two minutes on two cores, with one: a test
# that hangs ends the run with a clear message instead of holding CI until
# its own limit. RALLY_TEST_TIME_LIMIT (seconds) changes it.
swift build --build-tests
limit=${RALLY_TEST_TIME_LIMIT:-1500}
# At most 4 tests per core at once. Unbounded, swift-testing starts all of
# them together: on two cores a test that needs two seconds alone then took
# over sixty (starting its relay took nine, authenticating ten), past its
# suite's time limit, while the run as a whole took no less time. With the
# bound a test's time is its own and a time limit catches hangs, not load.
# Toolchains without the setting ignore it. (A test that computes for
# seconds runs its work with offThePool, ADR 0024, or it stalls the rest.)
cores=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
export SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH=${SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH:-$((4 * cores))}
# `node --test Tests/Browser/` (the browser call client's modules against
# the shared vector files) runs inside `swift test`, as the seed's
# cross-platform case (CallSessionTests).
status=0
if command -v timeout >/dev/null 2>&1; then
  timeout --kill-after=30 "$limit" swift test --skip-build "$@" || status=$?
else
  swift test --skip-build "$@" || status=$? # macOS without coreutils: no limit
fi
if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
  echo "scripts/test.sh: the tests did not finish within $limit s and were stopped (status $status)" >&2
fi
exit $status
