#!/usr/bin/env bash
# Fuzzes the invite decoder (link, slug, inflate, protobuf, signature) with
# libFuzzer and AddressSanitizer. Usage: scripts/fuzz-invite.sh [SECONDS]
# The corpus starts from the real invite links in scripts/fuzz-invite-seeds.txt and
# grows in .fuzz/invite-corpus; crashes land in .fuzz/. Leak detection is
# off: LeakSanitizer reports Swift's lazily initialised globals (static let)
# as leaks at exit.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-60}
cd "$root"
swift build --scratch-path .build-fuzz --product rally-fuzz-invite \
  -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library -Xswiftc -DRALLY_LIBFUZZER
mkdir -p .fuzz/invite-corpus
# Seeds: a mode-0 input per invite link in the seed file, if any.
if [ -f scripts/fuzz-invite-seeds.txt ]; then
  i=0
  while IFS= read -r line; do
    [ -n "$line" ] || continue
    printf '\0%s' "$line" > ".fuzz/invite-corpus/seed-$i"
    i=$((i + 1))
  done < scripts/fuzz-invite-seeds.txt
fi
ASAN_OPTIONS=detect_leaks=0 .build-fuzz/debug/rally-fuzz-invite .fuzz/invite-corpus -max_total_time="$seconds" \
  -max_len=8192 -rss_limit_mb=2048 -artifact_prefix=.fuzz/
