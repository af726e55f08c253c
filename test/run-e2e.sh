#!/usr/bin/env bash
# Runs the test module's packages in two lanes side by side: test/e2e (its rig, both modes, the
# disruptive tests last) in one, every other package (test/e2eauth and test/e2efault with their
# own rigs, one at a time, then the small ones) in the other. The rigs use separate port blocks
# and folders; the lanes share only the two cores. Each lane's output goes to a file and is
# printed when both have ended, a failed lane's last, so that the end of the output shows the
# failure. An interrupt stops both lanes and prints what they had printed. A COMMAND given runs
# in the other lane after its packages (make test: the peer suite's subset, in a network
# namespace of its own), where it fits in the time the e2e lane takes longer.
#
#   test/run-e2e.sh GO TIMEOUT [COMMAND...]
set -uo pipefail
set -m # each lane in a process group of its own, so that it can be stopped whole
go_cmd="${1:-go}" timeout="${2:-40m}"
shift $(($# < 2 ? $# : 2))
here="$(cd "$(dirname "$0")" && pwd)"

all="$("$go_cmd" list -C "$here" ./...)" || exit 1
others="$(grep -v '/test/e2e$' <<<"$all" || true)"
if [[ -z "$others" || "$others" == "$all" ]]; then
  echo "run-e2e: expected test/e2e and other packages in the test module, got:"$'\n'"$all" >&2
  exit 1
fi

logs="$(mktemp -d)"
lane() { # lane NAME COMMAND...: runs COMMAND into $logs/NAME.log and its duration beside it
  local name="$1" t0=$SECONDS rc=0
  shift
  "$@" >"$logs/$name.log" 2>&1 || rc=$?
  echo "$((SECONDS - t0))" >"$logs/$name.secs"
  return "$rc"
}
count() { grep -c "$1" "$logs/$2.log" 2>/dev/null || true; }

others_lane() { # the other packages, then COMMAND if any; fails if either failed
  local rc=0
  # shellcheck disable=SC2086 # $others is a list of package paths
  "$go_cmd" test -C "$here" -p 1 -count=1 -timeout "$timeout" -v $others || rc=$?
  if (($#)); then
    echo "== then: $*"
    "$@" || rc=1
  fi
  return "$rc"
}

lane others others_lane "$@" &
others_pid=$!
E2E_BOTH_MODES=1 lane e2e "$go_cmd" test -C "$here" -count=1 -timeout "$timeout" -v ./e2e &
e2e_pid=$!
( # a line a minute while the lanes run, so a long run is seen to move
  while sleep 60; do
    echo "… e2e: $(count '^--- PASS' e2e) passed, $(count '^--- FAIL' e2e) failed; others: $(count '^--- PASS' others) passed, $(count '^--- FAIL' others) failed"
  done
) &
progress_pid=$!

interrupted() {
  kill -TERM -- "-$others_pid" "-$e2e_pid" "-$progress_pid" 2>/dev/null
  wait
  for name in others e2e; do
    cat "$logs/$name.log" 2>/dev/null
    echo "== lane $name: interrupted"
  done
  rm -rf "$logs"
  exit 130
}
trap interrupted INT TERM HUP

# The lanes' exit codes are wait's, never read back from a file.
wait "$others_pid"
others_rc=$?
wait "$e2e_pid"
e2e_rc=$?
trap - INT TERM HUP
kill -TERM -- "-$progress_pid" 2>/dev/null
wait "$progress_pid" 2>/dev/null

rc=0
show() { # show NAME CODE
  cat "$logs/$1.log"
  echo "== lane $1 ($(cat "$logs/$1.secs" 2>/dev/null || echo '?')s, exit $2)"
}
if ((others_rc == 0)); then show others 0; fi
if ((e2e_rc == 0)); then show e2e 0; fi
if ((others_rc != 0)); then show others "$others_rc"; rc=1; fi
if ((e2e_rc != 0)); then show e2e "$e2e_rc"; rc=1; fi
rm -rf "$logs"
exit "$rc"
