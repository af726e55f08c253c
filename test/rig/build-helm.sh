#!/usr/bin/env bash
# Builds the pinned helm binary from the Go module proxy into the cache, once, for the chart
# tests (helm lint, helm template). Prints its path on the last line.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=common.sh
. "$here/common.sh"
bin="$cache/helm-$HELM_VERSION"

if [[ -x "$bin" ]]; then
  echo "helm: cached $bin"
  exit 0
fi
command -v go >/dev/null || { echo "helm: go is not on PATH; it is needed to build helm" >&2; exit 2; }

start=$(date +%s)
# Stamp what helm's own Makefile stamps: its version, and the Kubernetes version of its
# client-go (1.N for v0.N), which `helm template` assumes and checks kubeVersion against.
dir="$(module_dir "helm.sh/helm/v3@$HELM_VERSION")"
minor="$(sed -n 's|^[[:space:]]*k8s.io/client-go v0\.\([0-9]*\)\..*|\1|p' "$dir/go.mod")"
[[ -n "$minor" ]] || { echo "helm: could not read helm $HELM_VERSION's client-go version" >&2; exit 2; }
ldflags="-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
for pkg in pkg/chartutil pkg/lint/rules; do
  ldflags+=" -X helm.sh/helm/v3/$pkg.k8sVersionMajor=1 -X helm.sh/helm/v3/$pkg.k8sVersionMinor=$minor"
done
gobin="$(mktemp -d)"
trap 'rm -rf "$gobin"' EXIT
echo "helm: building $HELM_VERSION (a few minutes the first time)"
# -trimpath: the build cache then serves a rebuild from another checkout (e.g. a CI clone).
GOBIN="$gobin" CGO_ENABLED=0 GOFLAGS=-trimpath go install -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
mv "$gobin/helm" "$bin"
echo "helm: built $bin in $(( $(date +%s) - start ))s"
