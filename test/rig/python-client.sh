#!/usr/bin/env bash
# Installs the pinned Python Pulsar client (pulsar-client, PY_PULSAR_CLIENT_VERSION in
# versions.env) with its Avro extra (fastavro, for Avro schemas) into a virtualenv in the rig
# cache: $RIG_CACHE/py-pulsar-<version>.
# pip uses its default configuration (index, proxy, certificates) of this machine.
#
# When the virtualenv is complete (its marker exists, it imports pulsar at the pinned version
# and fastavro) this does nothing else and uses no network. The last line of its output is
# "python-client: python <path>", the interpreter to run programs with.
#
# Env: RIG_CACHE (default <repo>/.cache), RIG_PYTHON (default python3).
# Exit codes: 0 ok, 2 missing tool (python3 or its venv module), 3 install failed.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=common.sh
. "$here/common.sh"
version="$PY_PULSAR_CLIENT_VERSION"
venv="$cache/py-pulsar-$version"
marker="$venv/.installed"
py="$venv/bin/python"
log="$cache/py-pulsar-$version.log"
base="${RIG_PYTHON:-python3}"
t0="$(date +%s.%N)"

since() { awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1fs", b - a }'; }
die() { echo "python-client: $*" >&2; exit "${code:-2}"; }

# client_ready: the marker names the pinned version and the interpreter imports that client.
client_ready() {
  [[ -x "$py" && "$(cat "$marker" 2>/dev/null)" == "$version" ]] &&
    [[ "$("$py" -c 'import pulsar; print(pulsar.__version__)' 2>/dev/null)" == "$version" ]]
}
# ready: that, and the Avro extra is there too.
ready() { client_ready && "$py" -c 'import fastavro' 2>/dev/null; }
done_msg() {
  echo "python-client: $1 pulsar-client $version in $(since)"
  echo "python-client: python $py"
}

if ready; then done_msg "cached"; exit 0; fi

command -v "$base" >/dev/null 2>&1 ||
  die "$base is not on PATH; the Python client tests need Python 3.9+ with venv (Debian: apt-get install python3 python3-venv)"
"$base" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 9))' 2>/dev/null ||
  die "$base ($(command -v "$base")) is older than 3.9 or lacks the venv/ensurepip modules (Debian: apt-get install python3-venv)"

# One install at a time per cache; a second caller waits, then finds the result.
exec 9>"$venv.lock"
flock 9
if ready; then done_msg "cached"; exit 0; fi

# A virtualenv from before the Avro extra was pinned: add it, leaving the client in place (other
# tests may be running it).
if client_ready; then
  echo "python-client: adding the Avro extra of pulsar-client $version to $venv (log: $log)"
  "$py" -m pip install --no-input --disable-pip-version-check "pulsar-client[avro]==$version" >"$log" 2>&1 || {
    tail -n 15 "$log" | sed 's/^/  /' >&2
    code=3 die "installing the Avro extra of pulsar-client $version failed (full log: $log)"
  }
  ready || code=3 die "the virtualenv cannot import fastavro after installing the Avro extra"
  done_msg "completed"
  exit 0
fi

echo "python-client: installing pulsar-client $version into $venv (log: $log)"
rm -rf "$venv"
{
  "$base" -m venv "$venv" &&
    "$py" -m pip install --no-input --disable-pip-version-check "pulsar-client[avro]==$version"
} >"$log" 2>&1 || {
  tail -n 15 "$log" | sed 's/^/  /' >&2
  code=3 die "installing pulsar-client $version failed (pins are in $here/versions.env; full log: $log)"
}
ready_check="$("$py" -c 'import pulsar; print(pulsar.__version__)' 2>&1)" || code=3 die "the new virtualenv cannot import pulsar: $ready_check"
[[ "$ready_check" == "$version" ]] || code=3 die "pip installed pulsar-client $ready_check, not $version"
"$py" -c 'import fastavro' >/dev/null 2>&1 || code=3 die "the new virtualenv cannot import fastavro (the Avro extra)"
echo "$version" >"$marker"
done_msg "installed"
