#!/usr/bin/env bash
# Builds the pinned Consul agent from the Go module proxy into the rig cache, once.
# Consul's go.mod replaces its own submodules with ./api etc.; those replace lines are
# dropped so the published submodule versions are used instead.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=common.sh
. "$here/common.sh"
bin="$cache/consul-$CONSUL_VERSION"

if [[ -x "$bin" ]]; then
  echo "consul: cached $bin"
  exit 0
fi
command -v go >/dev/null || { echo "rig: go is not on PATH; it is needed to build Consul" >&2; exit 2; }

start=$(date +%s)
dir="$(module_dir "github.com/hashicorp/consul@$CONSUL_VERSION")"
[[ -n "$dir" && -d "$dir" ]] || { echo "rig: could not download github.com/hashicorp/consul@$CONSUL_VERSION" >&2; exit 2; }

work="$(mktemp -d)"
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
cp -r "$dir/." "$work/"
chmod -R u+w "$work"
sed -i '/=> \.\//d' "$work/go.mod"
echo "consul: building $CONSUL_VERSION (a few minutes the first time)"
# -trimpath: the build cache then serves a rebuild from another checkout (e.g. a CI clone).
(cd "$work" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -o "$bin.tmp" .)
mv "$bin.tmp" "$bin"
echo "consul: built $bin in $(( $(date +%s) - start ))s"
