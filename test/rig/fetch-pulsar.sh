#!/usr/bin/env bash
# Resolves the pinned Apache Pulsar jars into the rig cache: the brokers' (broker, proxy,
# pulsar-perf, log4j; pom.xml) to $RIG_CACHE/pulsar-$PULSAR_VERSION/classpath.txt, and the
# command-line tools' (the admin CLI and the example functions; pom-tools.xml) to
# tools-classpath.txt beside it.
#
# When both files exist and every jar they name exists, this does nothing and uses no network.
# When the local Maven repository already holds the artifacts, Maven runs offline (-o) first.
#
# Env: RIG_CACHE (default <repo>/.cache), RIG_PULSAR_VERSION (instead of the pin in versions.env).
# Exit codes: 0 ok, 2 missing tool, 3 resolution failed.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=common.sh
. "$here/common.sh"
PULSAR_VERSION="${RIG_PULSAR_VERSION:-$PULSAR_VERSION}"
export PULSAR_VERSION PULSAR_OTEL_VERSION PULSAR_JETCD_VERSION LOG4J_VERSION
out_dir="$cache/pulsar-$PULSAR_VERSION"
cp_file="$out_dir/classpath.txt"
tools_cp_file="$out_dir/tools-classpath.txt"
m2="$cache/m2"
start=$(date +%s)

die() { echo "fetch-pulsar: $*" >&2; exit "${code:-2}"; }

# classpath_complete succeeds when $1 lists at least one jar and all of them exist.
classpath_complete() {
  local f="$1" j n=0
  [[ -s "$f" ]] || return 1
  local -a jars
  IFS=: read -r -a jars <"$f"
  for j in "${jars[@]}"; do
    [[ -f "$j" ]] || return 1
    n=$((n + 1))
  done
  ((n > 0))
}
count_jars() { tr ':' '\n' <"$1" | grep -c .; }

all_cached() {
  if classpath_complete "$cp_file" && classpath_complete "$tools_cp_file"; then
    echo "fetch-pulsar: cached Pulsar $PULSAR_VERSION classpaths ($(count_jars "$cp_file") + $(count_jars "$tools_cp_file") jars, checked in $(($(date +%s) - start))s): $cp_file"
    return 0
  fi
  return 1
}
if all_cached; then exit 0; fi

command -v java >/dev/null 2>&1 ||
  die "java is not on PATH; the rig needs a Java 17 or newer runtime (Debian: apt-get install openjdk-17-jre-headless)"
java_major="$(java -version 2>&1 | sed -n 's/.*version "\([0-9][0-9.]*\).*/\1/p' | head -1)"
java_major="${java_major#1.}"
java_major="${java_major%%.*}"
[[ "$java_major" =~ ^[0-9]+$ ]] || die "could not read the Java version from 'java -version'"
((java_major >= 17)) || die "java is version $java_major; Pulsar $PULSAR_VERSION needs Java 17 or newer"
command -v mvn >/dev/null 2>&1 ||
  die "mvn is not on PATH; it is needed once to download the Pulsar jars (Debian: apt-get install maven)"

# One resolution at a time per cache; a second caller waits, then finds the result.
mkdir -p "$out_dir"
exec 9>"$out_dir/.lock"
flock 9
if all_cached; then exit 0; fi

log="$out_dir/mvn.log"
# run_mvn POM OUT [MAVEN ARGS...]: resolves POM's dependencies into the classpath file OUT.tmp.
run_mvn() {
  local pom="$1" out="$2"
  shift 2
  rm -f "$out.tmp"
  mvn -B -q -Dstyle.color=never "$@" -f "$here/$pom" -Dmaven.repo.local="$m2" \
    dependency:build-classpath -Dmdep.outputFile="$out.tmp" >"$log" 2>&1 &&
    classpath_complete "$out.tmp"
}

# resolve POM OUT WHAT MARKER_JAR: writes OUT unless it is complete, offline first when
# MARKER_JAR (a path in the local Maven repository) is there.
resolve() {
  local pom="$1" out="$2" what="$3" marker="$4" mode=""
  if classpath_complete "$out"; then return 0; fi
  if [[ -f "$m2/$marker" ]]; then
    echo "fetch-pulsar: resolving $what from the local Maven cache (offline)"
    run_mvn "$pom" "$out" -o && mode="offline"
  fi
  if [[ -z "$mode" ]]; then
    echo "fetch-pulsar: downloading $what and its dependencies (a few minutes the first time)"
    if run_mvn "$pom" "$out"; then
      mode="online"
    else
      echo "fetch-pulsar: could not resolve the $what jars. Maven said:" >&2
      sed 's/\x1b\[[0-9;]*m//g' "$log" |
        grep -E 'Could not (find|resolve|transfer|collect)|Failed to (collect|read|execute)|Non-resolvable|BUILD FAILURE' |
        sed -e 's/^\[ERROR\] *//' -e 's/ -> \[Help 1\]$//' | head -5 | cut -c1-600 | sed 's/^/  /' >&2
      echo "fetch-pulsar: full Maven log: $log" >&2
      if [[ -n "${RIG_PULSAR_VERSION:-}" ]]; then
        code=3 die "giving up (RIG_PULSAR_VERSION=$RIG_PULSAR_VERSION overrides the pin in $here/versions.env)"
      fi
      code=3 die "giving up (pins are in $here/versions.env)"
    fi
  fi
  mv "$out.tmp" "$out"
  echo "fetch-pulsar: resolved $(count_jars "$out") jars ($mode) in $(($(date +%s) - start))s: $out"
}

p="org/apache/pulsar"
resolve pom.xml "$cp_file" "Pulsar $PULSAR_VERSION" "$p/pulsar-broker/$PULSAR_VERSION/pulsar-broker-$PULSAR_VERSION.jar"
resolve pom-tools.xml "$tools_cp_file" "Pulsar $PULSAR_VERSION admin CLI and example functions" \
  "$p/pulsar-client-tools/$PULSAR_VERSION/pulsar-client-tools-$PULSAR_VERSION.jar"
