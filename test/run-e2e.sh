#!/usr/bin/env bash
# Runs the test module's packages in three lanes side by side, each with rigs of its own:
# test/e2e's two halves (E2E_HALF, test/e2e/passes_test.go: half 1 the direct tests; half 2 the
# long direct tests, the multiplexed pass and the disruptive tests, in a network namespace of
# its own so that its rig can use the same ports), and every other package one at a time
# (test/e2eauth and test/e2efault with their own rigs, then the small ones). The lanes share
# only the two cores. Each lane's output goes to a file and is printed when all have ended,
# failed lanes last, so that the end of the output shows the failure. An interrupt stops every
# lane and prints what they had printed. A COMMAND given runs after half 1 (make test: the
# peer suite's subset, in a network namespace of its own), where it fits in the time the other
# lanes take longer.
#
#   test/run-e2e.sh GO TIMEOUT [COMMAND...]
set -uo pipefail
set -m # each lane in a process group of its own, so that it can be stopped whole
go_cmd="${1:-go}" timeout="${2:-40m}"
shift $(($# < 2 ? $# : 2))
here="$(cd "$(dirname "$0")" && pwd)"
# The tests' rigs run Pulsar with the client compiler alone (RIG_JAVA_OPTS, unless set, even
# empty): a broker starts on about 40 % less CPU, which three lanes on two cores need. The
# benchmarks, which measure brokers, leave it unset.
export RIG_JAVA_OPTS="${RIG_JAVA_OPTS--XX:TieredStopAtLevel=1}"

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

others_lane() { # the other packages, one at a time
  # shellcheck disable=SC2086 # $others is a list of package paths
  "$go_cmd" test -C "$here" -p 1 -count=1 -timeout "$timeout" -v $others
}

# test/e2e is built once; both halves run the binary in the package's folder, as go test does.
e2e_bin="$logs/e2e.test"
half() { # half N [COMMAND...]: test/e2e's half N, then COMMAND if any; fails if either failed
  local n="$1" rc=0
  shift
  (cd "$here/e2e" && E2E_HALF="$n" exec "$e2e_bin" -test.count=1 -test.timeout "$timeout" -test.v) || rc=$?
  echo "== e2e half $n: exit $rc"
  if (($#)); then
    echo "== then: $*"
    "$@" || rc=1
  fi
  return "$rc"
}
# Half 2's rig uses the default ports in a loopback of its own, its state beside the others'.
half2_state="${RIG_STATE:-$here/../.rigs}/e2e-half2"
half2() {
  RIG_STATE="$half2_state" unshare -rn bash -c 'ip link set lo up && half 2'
}
export -f half
export e2e_bin here timeout

declare -A pid code
lane others others_lane &
pid[others]=$!
if ! "$go_cmd" test -C "$here" -c -o "$e2e_bin" ./e2e; then
  kill -TERM -- "-${pid[others]}" 2>/dev/null
  wait
  exit 1
fi
if [[ -n "${PULSAR_PROXY_RIG:-}" ]]; then # one rig, attached: the halves take turns on it
  lanes="others e2e"
  lane e2e bash -c 'half 1 && half 2 "$@"' bash "$@" &
  pid[e2e]=$!
else
  lanes="others e2e-1 e2e-2"
  lane e2e-1 half 1 "$@" &
  pid[e2e-1]=$!
  lane e2e-2 half2 &
  pid[e2e-2]=$!
fi
( # a line a minute while the lanes run, so a long run is seen to move
  while sleep 60; do
    line="…"
    for name in $lanes; do line+=" $name: $(count '^--- PASS' "$name") passed, $(count '^--- FAIL' "$name") failed;"; done
    echo "${line%;}"
  done
) &
progress_pid=$!

interrupted() {
  for name in $lanes; do kill -TERM -- "-${pid[$name]}" 2>/dev/null; done
  kill -TERM -- "-$progress_pid" 2>/dev/null
  wait
  for name in $lanes; do
    cat "$logs/$name.log" 2>/dev/null
    echo "== lane $name: interrupted"
  done
  rm -rf "$logs"
  exit 130
}
trap interrupted INT TERM HUP

# The lanes' exit codes are wait's, never read back from a file.
for name in $lanes; do
  wait "${pid[$name]}"
  code[$name]=$?
done
trap - INT TERM HUP
kill -TERM -- "-$progress_pid" 2>/dev/null
wait "$progress_pid" 2>/dev/null

show() { # show NAME: the lane's output and how it ended
  cat "$logs/$1.log"
  echo "== lane $1 ($(cat "$logs/$1.secs" 2>/dev/null || echo '?')s, exit ${code[$1]})"
}
rc=0
for name in $lanes; do if ((code[$name] == 0)); then show "$name"; fi; done
for name in $lanes; do if ((code[$name] != 0)); then show "$name"; rc=1; fi; done
rm -rf "$logs"
exit "$rc"
