#!/usr/bin/env bash
# Regenerate frame/pb/pulsar_api.pb.go from frame/pb/pulsar_api.proto.
#
# Tools:
#   protoc          from Debian's protobuf-compiler package
#                   (apt-get install -y protobuf-compiler)
#   protoc-gen-go   built from google.golang.org/protobuf at the version pinned
#                   in go.mod, into the git-ignored .cache/bin
# The output depends only on those two versions and the .proto, so running
# this twice leaves the tree unchanged.
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"

if ! command -v protoc >/dev/null 2>&1; then
	echo "gen.sh: protoc not found; install Debian's protobuf-compiler package" >&2
	exit 1
fi

bin="$root/.cache/bin"
mkdir -p "$bin"
# go build uses the google.golang.org/protobuf version from go.mod/go.sum.
go build -o "$bin/protoc-gen-go" google.golang.org/protobuf/cmd/protoc-gen-go

protoc \
	--plugin=protoc-gen-go="$bin/protoc-gen-go" \
	-I frame/pb \
	--go_out=frame/pb \
	--go_opt=paths=source_relative \
	pulsar_api.proto

gofmt -l frame/pb/pulsar_api.pb.go | (! grep .) || { echo "gen.sh: generated code is not gofmt-clean" >&2; exit 1; }
echo "gen.sh: wrote frame/pb/pulsar_api.pb.go ($(protoc --version), protoc-gen-go $("$bin/protoc-gen-go" --version | awk '{print $2}'))"
