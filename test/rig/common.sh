# Sourced (not run) by the rig's scripts, after they set $here to this folder: the pinned
# versions, the cache folder and a helper for modules from the Go module proxy.
# shellcheck shell=bash

# shellcheck source=versions.env
. "$here/versions.env"

# cache: RIG_CACHE (default <repo>/.cache), created, as an absolute path.
cache="${RIG_CACHE:-$here/../../.cache}"
mkdir -p "$cache"
cache="$(cd "$cache" && pwd)"

# rigs: where rigs keep their state (RIG_STATE, default <repo>/.rigs), created, absolute. Not
# in the cache: worktrees that share one cache must not share a running rig's state.
rigs="${RIG_STATE:-$here/../../.rigs}"
mkdir -p "$rigs"
rigs="$(cd "$rigs" && pwd)"

# module_dir MODULE@VERSION: downloads the module through the Go module proxy and prints the
# folder it is in.
module_dir() {
  go mod download -json "$1" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'
}
