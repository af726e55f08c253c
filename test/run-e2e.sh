#!/usr/bin/env bash
# Runs the test module's packages in two lanes side by side: test/e2e (its rig, both modes, the
# disruptive tests last) in one, every other package (test/e2eauth and test/e2efault with their
# own rigs, one at a time, then the small ones) in the other. The rigs use separate port blocks
# and folders; the lanes only share the two cores, and test/e2e's last, disruptive part runs
# after the other lane is done. Each lane's output goes to a file and is printed when the lane
# ends, a failed lane last, so that the end of the output shows the failure.
#
#   test/run-e2e.sh GO TIMEOUT
set -uo pipefail
go_cmd="${1:-go}" timeout="${2:-40m}"
here="$(cd "$(dirname "$0")" && pwd)"
logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT

others="$("$go_cmd" list -C "$here" ./... | grep -v '/test/e2e$')" || exit 1

lane() { # lane NAME COMMAND...: runs COMMAND into $logs/NAME.log, its exit code and time beside
  local name="$1" t0 rc=0
  shift
  t0=$(date +%s)
  "$@" >"$logs/$name.log" 2>&1 || rc=$?
  echo "$rc $(($(date +%s) - t0))" >"$logs/$name.rc"
}

# shellcheck disable=SC2086 # $others is a list of package paths
lane others "$go_cmd" test -C "$here" -p 1 -count=1 -timeout "$timeout" -v $others &
others_pid=$!
E2E_BOTH_MODES=1 lane e2e "$go_cmd" test -C "$here" -count=1 -timeout "$timeout" -v ./e2e &
e2e_pid=$!

# A line a minute while the lanes run, so a long run is seen to move.
count() { grep -c "$1" "$logs/$2.log" 2>/dev/null || true; }
(
  while sleep 60; do
    echo "… e2e: $(count '^--- PASS' e2e) passed, $(count '^--- FAIL' e2e) failed; others: $(count '^--- PASS' others) passed, $(count '^--- FAIL' others) failed"
  done
) &
progress_pid=$!
wait "$others_pid" "$e2e_pid"
kill "$progress_pid" 2>/dev/null
wait "$progress_pid" 2>/dev/null

# Each lane's output, a failed lane's last.
rc=0 failed=()
for name in others e2e; do
  read -r code secs <"$logs/$name.rc"
  if ((code != 0)); then failed+=("$name"); rc=1; continue; fi
  cat "$logs/$name.log"
  echo "== lane $name (${secs}s, exit 0)"
done
for name in "${failed[@]}"; do
  read -r code secs <"$logs/$name.rc"
  cat "$logs/$name.log"
  echo "== lane $name (${secs}s, exit $code)"
done
exit "$rc"
