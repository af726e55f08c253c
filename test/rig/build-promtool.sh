#!/usr/bin/env bash
# Builds the pinned promtool from the Go module proxy into the cache, once, for the alert rule
# tests (promtool check rules, promtool test rules). Prints its path on the last line.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=common.sh
. "$here/common.sh"
bin="$cache/promtool-$PROMTOOL_VERSION"

if [[ -x "$bin" ]]; then
  echo "promtool: cached $bin"
  echo "$bin"
  exit 0
fi
command -v go >/dev/null || { echo "promtool: go is not on PATH; it is needed to build promtool" >&2; exit 2; }

start=$(date +%s)
# Stamp the version Prometheus's own release build stamps (its VERSION file: module v0.316.0 is
# Prometheus 3.16.0), so `promtool --version` names what it is.
dir="$(module_dir "github.com/prometheus/prometheus@$PROMTOOL_VERSION")"
release="$(cat "$dir/VERSION")"
[[ -n "$release" ]] || { echo "promtool: could not read the VERSION of prometheus $PROMTOOL_VERSION" >&2; exit 2; }
ldflags="-X github.com/prometheus/common/version.Version=$release -X github.com/prometheus/common/version.Branch=release"
gobin="$(mktemp -d)"
trap 'rm -rf "$gobin"' EXIT
echo "promtool: building $PROMTOOL_VERSION (Prometheus $release; several minutes the first time)"
# -trimpath: the build cache then serves a rebuild from another checkout (e.g. a CI clone).
GOBIN="$gobin" CGO_ENABLED=0 GOFLAGS=-trimpath go install -ldflags "$ldflags" "github.com/prometheus/prometheus/cmd/promtool@$PROMTOOL_VERSION"
mv "$gobin/promtool" "$bin"
echo "promtool: built $bin in $(( $(date +%s) - start ))s"
echo "$bin"
