#!/usr/bin/env bash
# Compare frame/pb/pulsar_api.proto with another description of the Pulsar
# protocol (typically a copy of upstream's PulsarApi.proto) field by field.
# Usage: frame/pb/protodiff.sh /path/to/PulsarApi.proto
# Prints the differences; exits 0 only if there are none.
set -euo pipefail
if [ $# -ne 1 ]; then
	echo "usage: $0 /path/to/PulsarApi.proto" >&2
	exit 2
fi
here="$(cd "$(dirname "$0")" && pwd)"
theirs="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
protoc -I "$here" --descriptor_set_out="$tmp/ours.pb" pulsar_api.proto
protoc -I "$(dirname "$theirs")" --descriptor_set_out="$tmp/theirs.pb" "$(basename "$theirs")"
cd "$here/../.."
go run ./frame/pb/internal/protodiff "$tmp/ours.pb" "$tmp/theirs.pb"
