#!/usr/bin/env bash
# Regenerates Sources/RallyWire/Generated from Sources/RallyWire/Proto.
# Needs protoc and protoc-gen-swift (swift-protobuf 1.39.0) on PATH, or
# PROTOC_GEN_SWIFT pointing at the plugin. CI never runs this: the
# generated Swift is committed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
plugin=${PROTOC_GEN_SWIFT:-$(command -v protoc-gen-swift || true)}
if [ -z "$plugin" ]; then
  echo "protoc-gen-swift not found: build it from swift-protobuf 1.39.0 (swift build -c release --product protoc-gen-swift) and set PROTOC_GEN_SWIFT" >&2
  exit 1
fi
out="$root/Sources/RallyWire/Generated"
mkdir -p "$out"
rm -f "$out"/*.pb.swift
protoc --plugin=protoc-gen-swift="$plugin" \
  --swift_opt=Visibility=Public \
  --swift_opt=FileNaming=PathToUnderscores \
  -I "$root/Sources/RallyWire/Proto" \
  --swift_out="$out" \
  "$root"/Sources/RallyWire/Proto/*.proto
echo "generated: $(ls "$out")"
