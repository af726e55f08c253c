#!/usr/bin/env bash
# The peer suite gate: pulsar-client-go's own tests (./pulsar of the version test/go.mod pins,
# from the module cache, with its own certificates, tokens and credentials file) against two
# Pulsar brokers configured as the client's CI configures its broker, once directly and once
# through pulsar-proxy; it fails on a test that passes directly and fails through the proxy.
# See test/peer/README.md.
#
#   peer.sh prepare           outside any namespace (downloads): the client's test binary, the
#                             proxy, peertool, the rig's jars
#   peer.sh run [REGEX] [PAGE]  inside `unshare -rn` (its own loopback): rig, proxy, both runs
#                             (the tests REGEX selects, each PEER_COUNT times, default 1), the
#                             reruns of the differences (PEER_RERUNS in each mode, default 5),
#                             the comparison (written to PAGE when given), everything stopped;
#                             with PEER_CLIENTS=PAGE2 the clients check below too, on the same rig
#   peer.sh clients [PAGE]    inside `unshare -rn`: the Java and the Python client, with the
#                             proxy's HTTP URL as service URL and no broker reachable, produce
#                             and consume over partitions owned by both brokers (PAGE: results)
#
# Ports (all in the run's own network namespace): brokers 16650/16651 (TLS) and 18080/18443
# (web), 16652/16653 and 18081/18444; the proxy 26650/26651 and 28080/28443. Each test run has
# a namespace of its own (unshare -n) whose 6650, 6651, 8080 and 8443 (the ports the tests
# hardcode) are relays: to broker 1 (and every broker port relayed too) directly, to the proxy
# alone through it.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
PEER_DIR="${PEER_DIR:-$repo/bin/peer}"
GO="${GO:-go}"
client_version="$(awk '$1 == "github.com/apache/pulsar-client-go" { print $2 }' "$repo/test/go.mod")"
pulsar_version="$(. "$repo/test/rig/versions.env"; echo "$PULSAR_VERSION")"
client_src="$("$GO" env GOMODCACHE)/github.com/apache/pulsar-client-go@$client_version"
say() { echo "peer: $*"; }

prepare() {
  mkdir -p "$PEER_DIR"
  [[ -d "$client_src" ]] || "$GO" mod download -C "$repo/test" "github.com/apache/pulsar-client-go@$client_version"
  rm -rf "$PEER_DIR/client"
  cp -r "$client_src" "$PEER_DIR/client"
  chmod -R u+w "$PEER_DIR/client"
  say "building pulsar-client-go $client_version's ./pulsar tests"
  "$GO" test -C "$PEER_DIR/client" -c -o "$PEER_DIR/pulsar.test" ./pulsar
  "$GO" build -C "$repo/test" -o "$PEER_DIR/peertool" ./peer/peertool
  "$GO" build -o "$PEER_DIR/test2json" cmd/test2json
  "$GO" build -C "$repo" -o "$PEER_DIR/pulsar-proxy" ./cmd/pulsar-proxy
  "$repo/test/rig/rig.sh" prepare
  "$repo/test/rig/python-client.sh" >/dev/null
}

certs() { echo "$PEER_DIR/client/integration-tests/certs"; }
tokens() { echo "$PEER_DIR/client/integration-tests/tokens"; }

# configure writes the brokers' extra configuration (the client's CI standalone.conf's
# security and topic settings, and the proxy's role) and the proxy's configuration.
configure() {
  local c t
  c="$(certs)" t="$(tokens)"
  "$PEER_DIR/peertool" token "$t/secret.key" proxy >"$PEER_DIR/proxy-token"
  cat >"$PEER_DIR/broker.conf" <<EOF
tlsCertificateFilePath=$c/broker-cert.pem
tlsKeyFilePath=$c/broker-key.pem
tlsTrustCertsFilePath=$c/cacert.pem
tlsAllowInsecureConnection=false
anonymousUserRole=anonymous
authenticationEnabled=true
authenticationProviders=org.apache.pulsar.broker.authentication.AuthenticationProviderTls,org.apache.pulsar.broker.authentication.AuthenticationProviderToken,org.apache.pulsar.broker.authentication.AuthenticationProviderBasic
tokenSecretKey=file://$t/secret.key
basicAuthConf=$PEER_DIR/client/integration-tests/conf/.htpasswd
authorizationEnabled=true
superUserRoles=localhost,superUser,admin,proxy
proxyRoles=proxy
brokerClientAuthenticationPlugin=org.apache.pulsar.client.impl.auth.AuthenticationToken
brokerClientAuthenticationParameters=file://$t/admin-token
brokerDeleteInactiveTopicsEnabled=true
brokerDeleteInactiveTopicsFrequencySeconds=60
topicLevelPoliciesEnabled=true
systemTopicEnabled=true
systemTopicSchemaCompatibilityStrategy=ALWAYS_COMPATIBLE
allowAutoTopicCreation=true
allowAutoTopicCreationType=non-partitioned
allowAutoSubscriptionCreation=true
transactionBufferSnapshotMaxTransactionCount=1000
transactionBufferSnapshotMinTimeInMillis=5000
EOF
  cat >"$PEER_DIR/proxy.yaml" <<EOF
listen:
  pulsar: 127.0.0.1:26650
  pulsarTLS: 127.0.0.1:26651
  http: 127.0.0.1:28080
  advertised:
    pulsar: pulsar://localhost:6650
    pulsarTLS: pulsar+ssl://localhost:6651
    http: http://localhost:8080
    https: https://localhost:8443
admin:
  listenHTTPS: 127.0.0.1:28443
tls:
  certFile: $c/broker-cert.pem
  keyFile: $c/broker-key.pem
  clientCAFile: $c/cacert.pem
  clientAuth: request
discovery:
  static:
    brokers: [pulsar://localhost:16650, pulsar://localhost:16652]
    webBrokers: [http://localhost:18080, http://localhost:18081]
broker:
  allowedPorts: [16650, 16652]
  allowedWebPorts: [18080, 18081]
auth:
  enabled: true
  anonymousRole: anonymous
  token:
    secretKeyFile: $t/secret.key
  basic:
    credentialsFile: $PEER_DIR/client/integration-tests/conf/.htpasswd
  brokerClient:
    tokenFile: $PEER_DIR/proxy-token
log:
  level: info
EOF
}

rig() {
  RIG_DIR="$PEER_DIR/rig" RIG_TRANSACTIONS=1 RIG_ADVERTISED_ADDRESS=localhost RIG_ADMIN_TOKEN="$(cat "$(tokens)/admin-token")" \
    RIG_BROKER_EXTRA_CONF="$PEER_DIR/broker.conf" \
    RIG_BROKER1_PORT=16650 RIG_BROKER1_TLS_PORT=16651 RIG_BROKER1_HTTP_PORT=18080 RIG_BROKER1_WEB_TLS_PORT=18443 \
    RIG_BROKER2_PORT=16652 RIG_BROKER2_TLS_PORT=16653 RIG_BROKER2_HTTP_PORT=18081 RIG_BROKER2_WEB_TLS_PORT=18444 \
    "$repo/test/rig/rig.sh" "$@"
}

# admin METHOD PATH [JSON]: the brokers' admin API as the client's CI's superuser.
admin() {
  curl -fsS -L --location-trusted -o /dev/null -X "$1" -H "Authorization: Bearer $(cat "$(tokens)/admin-token")" \
    -H 'Content-Type: application/json' ${3:+--data "$3"} "http://127.0.0.1:18080$2"
}

# setup does what the client's CI does after its broker starts (pulsar-test-service-start.sh),
# and makes the proxy's role an admin of both tenants: a broker lets a proxied client do what
# a tenant admin does only when the proxy's role may do it too (docs/broker-roles.md).
setup() {
  admin POST /admin/v2/tenants/public '{"adminRoles":["anonymous","proxy"],"allowedClusters":["standalone"]}'
  admin POST /admin/v2/namespaces/public/default/permissions/anonymous '["produce","consume"]'
  admin PUT /admin/v2/tenants/private '{"adminRoles":["proxy"],"allowedClusters":["standalone"]}' || true
  admin PUT /admin/v2/namespaces/private/auth || true
  admin POST /admin/v2/namespaces/private/auth/permissions/token-principal '["produce","consume"]'
}

# relays MODE PORT...: the outer relays, unix socket MODE-PORT to 127.0.0.1:TARGET.
outer_relays() {
  local args=() p
  for p in "$@"; do args+=("unix:$PEER_DIR/sock/${p%%=*}=tcp:127.0.0.1:${p#*=}"); done
  "$PEER_DIR/peertool" relay "${args[@]}" >"$PEER_DIR/logs/relay-outer.log" 2>&1 &
  echo $! >"$PEER_DIR/pids/relay-outer"
}

# in_namespace NAME PORTS COMMAND...: runs COMMAND in a network namespace of its own whose
# loopback PORTS (PORT=SOCKET names) are relays to the outer unix sockets.
in_namespace() {
  local name="$1" ports="$2"
  shift 2
  unshare -n bash -c '
    set -e
    ip link set lo up
    args=()
    for p in '"$ports"'; do args+=("tcp:127.0.0.1:${p%%=*}=unix:'"$PEER_DIR"'/sock/${p#*=}"); done
    "'"$PEER_DIR"'/peertool" relay "${args[@]}" >"'"$PEER_DIR"'/logs/relay-'"$name"'.log" 2>&1 &
    relay=$!
    trap "kill $relay" EXIT
    for i in $(seq 50); do grep -q ready "'"$PEER_DIR"'/logs/relay-'"$name"'.log" 2>/dev/null && break; sleep 0.1; done
    "$@"
  ' in_namespace "$@"
}

direct_ports="6650=d16650 6651=d16651 8080=d18080 8443=d18443 16650=d16650 16651=d16651 16652=d16652 16653=d16653 18080=d18080 18081=d18081 18443=d18443 18444=d18444"
proxy_ports="6650=p26650 6651=p26651 8080=p28080 8443=p28443"

# PEER_SKIP are the tests left out of every run: they start a broker in Docker
# (testcontainers), which panics the whole test binary where there is no Docker.
PEER_SKIP="${PEER_SKIP:-^(TestConsumerKeepReconnectingAndThenCallClose|TestProducerKeepReconnectingAndThenCallClose|TestSendAsyncCouldTimeoutWhileReconnecting|TestReconnectConsumer|TestReconnectedBrokerSendPermits)$}"

# suite NAME REGEX: the client's tests in namespace NAME, as go test -json into NAME.json, on
# namespaces emptied first (clean). A test that panics ends the test binary and every test
# after it unrun, whichever way it runs (a timing-sensitive test's nil message on a loaded
# machine): the binary is run again on the tests not yet started (peertool remaining), at most
# a few times, so a panic costs that test, not the rest of the comparison.
suite() {
  local name="$1" regex="$2" ports="$direct_ports" out="$PEER_DIR/$1.json" list="$PEER_DIR/$1.list" run_regex="$2" pass
  [[ "$name" == direct* ]] || ports="$proxy_ports"
  clean
  (cd "$PEER_DIR/client/pulsar" && "$PEER_DIR/pulsar.test" -test.list "${regex:-.}") | grep -E '^(Test|Example)' |
    grep -Ev "$PEER_SKIP" >"$list" || true
  : >"$out"
  : >"$PEER_DIR/logs/$name.stderr"
  for pass in 1 2 3 4 5; do
    [[ $pass -gt 1 ]] || say "running pulsar-client-go's tests $name${regex:+ (-run $regex)}"
    (cd "$PEER_DIR/client/pulsar" && in_namespace "$name" "$ports" \
      "$PEER_DIR/test2json" -t -p github.com/apache/pulsar-client-go/pulsar \
      "$PEER_DIR/pulsar.test" -test.v=test2json -test.count="${PEER_COUNT:-1}" -test.timeout=60m -test.skip "$PEER_SKIP" ${run_regex:+-test.run "$run_regex"}) \
      >>"$out" 2>>"$PEER_DIR/logs/$name.stderr" || true
    run_regex="$("$PEER_DIR/peertool" remaining "$list" "$out")"
    [[ -n "$run_regex" ]] || return 0
    say "$name: the test binary ended with $(tr '|' '\n' <<<"$run_regex" | wc -l) tests not started (a test panicked); running those"
  done
}

# clean deletes every topic of the namespaces the tests use, so that a run does not find what
# the one before it left (the tests use fixed names, as on the fresh broker of the client's CI).
clean() {
  local ns kind t
  for ns in public/default private/auth; do
    for t in $(admin_get "/admin/v2/persistent/$ns/partitioned" | topic_names); do
      admin DELETE "/admin/v2/persistent/${t#persistent://}/partitions?force=true&deleteSchema=true" || true
    done
    for kind in persistent non-persistent; do
      for t in $(admin_get "/admin/v2/$kind/$ns" | topic_names); do
        admin DELETE "/admin/v2/$kind/${t#*://}?force=true&deleteSchema=true" || true
      done
    done
  done >>"$PEER_DIR/logs/clean.log" 2>&1
}

# admin_get PATH: an admin GET at broker 1, as the superuser.
admin_get() {
  curl -fsS -L --location-trusted -H "Authorization: Bearer $(cat "$(tokens)/admin-token")" "http://127.0.0.1:18080$1" || echo '[]'
}

# topic_names reads a JSON list of topic names, one a line.
topic_names() { tr -d '[]" ' | tr ',' '\n' | grep . || true; }

run() {
  local regex="${1:-}" page="${2:-$PEER_DIR/peer-suite.md}" rc=0 commit
  commit="$(git -C "$repo" rev-parse --short HEAD)" # the proxy's, built by prepare
  start
  suite direct "$regex"
  suite proxy "$regex"
  rerun_failures
  PEER_COMMIT="$commit" PEER_CLIENT_VERSION="$client_version" PEER_PULSAR_VERSION="$pulsar_version" PEER_SKIP="$PEER_SKIP" \
    "$PEER_DIR/peertool" report "$PEER_DIR/direct.json" "$PEER_DIR/proxy.json" "$page" $(reruns) || rc=$?
  # The Java and the Python client on the same rig (PEER_CLIENTS: their page).
  if [[ -n "${PEER_CLIENTS:-}" ]]; then clients_check "$PEER_CLIENTS" || rc=1; fi
  stop_proxy
  "$PEER_DIR/peertool" logcheck "$PEER_DIR/logs/proxy.log" || rc=1
  return "$rc"
}

# stop_proxy stops the proxy (SIGTERM, as Kubernetes does) and waits for it to exit.
stop_proxy() {
  local pid
  [[ -f "$PEER_DIR/pids/proxy" ]] || return 0
  pid="$(cat "$PEER_DIR/pids/proxy")"
  kill "$pid" 2>/dev/null || true
  for i in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  rm -f "$PEER_DIR/pids/proxy"
}

# rerun_failures runs the tests that passed directly and failed through the proxy again,
# PEER_RERUNS times in each mode (each run on emptied namespaces): a client's test can be
# timing-sensitive, and peertool report counts one against the proxy only if its reruns say
# the proxy fails it (passes directly every time and fails through the proxy again, or never
# passes through the proxy), not when it fails directly too (flaky in both modes).
rerun_failures() {
  local failed i
  failed="$("$PEER_DIR/peertool" failed "$PEER_DIR/direct.json" "$PEER_DIR/proxy.json")"
  rm -f "$PEER_DIR"/direct-rerun-*.json "$PEER_DIR"/proxy-rerun-*.json
  [[ -n "$failed" ]] || return 0
  for i in $(seq "${PEER_RERUNS:-5}"); do
    suite "direct-rerun-$i" "$failed"
    suite "proxy-rerun-$i" "$failed"
  done
}

# reruns lists the reruns' result files.
reruns() {
  local f
  for f in "$PEER_DIR"/direct-rerun-*.json "$PEER_DIR"/proxy-rerun-*.json; do [[ -f "$f" ]] && echo "$f"; done
  return 0
}

# start brings the rig, the proxy and the outer relays up (stopped at exit).
start() {
  [[ -x "$PEER_DIR/pulsar.test" ]] || { echo "peer: run 'peer.sh prepare' (make peer-prepare) first" >&2; exit 2; }
  mkdir -p "$PEER_DIR/logs" "$PEER_DIR/pids" "$PEER_DIR/sock"
  configure
  trap stop EXIT
  rig up
  setup
  "$PEER_DIR/pulsar-proxy" -config "$PEER_DIR/proxy.yaml" >"$PEER_DIR/logs/proxy.log" 2>&1 &
  echo $! >"$PEER_DIR/pids/proxy"
  outer_relays d16650=16650 d16651=16651 d16652=16652 d16653=16653 d18080=18080 d18081=18081 d18443=18443 d18444=18444 \
    p26650=26650 p26651=26651 p28080=28080 p28443=28443
  for i in $(seq 100); do curl -fsS -o /dev/null http://127.0.0.1:28080/readyz 2>/dev/null && break; sleep 0.2; done
}

# owner PARTITION_TOPIC: the broker URL that owns it (a lookup at broker 1, redirects followed).
owner() {
  curl -fsS -L --location-trusted -H "Authorization: Bearer $(cat "$(tokens)/admin-token")" \
    "http://127.0.0.1:18080/lookup/v2/topic/persistent/${1#persistent://}" | sed 's|^.*"brokerUrl":"\([^"]*\)".*$|\1|'
}

# spread makes sure both brokers own partitions of TOPIC (N partitions): when one owns them
# all, partition 0's bundle is moved to the other.
spread() {
  local topic="$1" n="$2" first bundle dest
  first="$(owner "$topic-partition-0")"
  for i in $(seq 1 $((n - 1))); do [[ "$(owner "$topic-partition-$i")" != "$first" ]] && return 0; done
  bundle="$(curl -fsS -L --location-trusted -H "Authorization: Bearer $(cat "$(tokens)/admin-token")" \
    "http://127.0.0.1:18080/lookup/v2/topic/persistent/${topic#persistent://}-partition-0/bundle" | tr -d '"')"
  dest=localhost:18081
  [[ "$first" == *16652* ]] && dest=localhost:18080
  admin PUT "/admin/v2/namespaces/public/default/$bundle/unload?destinationBroker=$dest"
  owner "$topic-partition-0" >/dev/null
}

clients() {
  start
  clients_check "${1:-$PEER_DIR/peer-clients.md}"
}

# clients_check PAGE: the Java and the Python client's check on the running rig and proxy.
clients_check() {
  local page="$1" topic=persistent://public/default/peer-http-lookup n=4 count=40 python owners="" rc=0
  python="$("$repo/test/rig/python-client.sh" | sed -n 's/^python-client: python //p')"
  say "the Java and the Python client, service URL http://localhost:8080 (the proxy), no broker reachable"
  admin PUT /admin/v2/persistent/public/default/peer-http-lookup/partitions "$n"
  spread "$topic" "$n"
  for i in $(seq 0 $((n - 1))); do owners+="$i: $(owner "$topic-partition-$i"); "; done
  say "partition owners: $owners"
  local java_out py_out routed before
  before="$(routed_sessions)"
  java_out="$(in_namespace clients-java "$proxy_ports" java -cp "$(cat "$("$repo/test/rig/rig.sh" classpath-file)")" \
    "$here/HTTPLookupClient.java" http://localhost:8080 "$topic" "$count" 2>&1 | tee "$PEER_DIR/logs/java.log" | grep '^result ' | tail -1)" || rc=1
  py_out="$(in_namespace clients-python "$proxy_ports" "$python" "$here/http_lookup_client.py" http://localhost:8080 "$topic" "$count" \
    2>&1 | tee "$PEER_DIR/logs/python.log" | grep '^result ' | tail -1)" || rc=1
  routed=$(($(routed_sessions) - before))
  {
    echo "# The peer clients: the Java and the Python client through HTTP lookups"
    echo
    echo "<!-- Generated by \`make peer-suite\` (test/peer/peer.sh); do not edit by hand. -->"
    echo
    echo "Run $(date -u '+%Y-%m-%d %H:%M UTC') at commit \`${commit:-$(git -C "$repo" rev-parse --short HEAD)}\`: each client, given the proxy's"
    echo "HTTP URL as service URL in a network namespace where no broker can be reached, produces $count"
    echo "messages round robin over the $n partitions of \`$topic\` and consumes them back (test/peer/README.md)."
    echo
    echo "| client | service URL | result |"
    echo "|---|---|---|"
    echo "| Java (pulsar-client $pulsar_version) | http://localhost:8080 | ${java_out:-no result} |"
    echo "| Python (pulsar-client $(. "$repo/test/rig/versions.env"; echo "$PY_PULSAR_CLIENT_VERSION")) | http://localhost:8080 | ${py_out:-no result} |"
    echo
    echo "Partition owners (looked up at the brokers): $owners; routed sessions the proxy served them: $routed."
  } >"$page"
  cat "$page"
  [[ "$java_out" == "result sent=$count received=$count partitions=$n" && "$py_out" == "result sent=$count received=$count partitions=$n" && "$routed" -ge 2 ]] || rc=1
  return "$rc"
}

# routed_sessions: the proxy's count of sessions that became routed (HTTP-lookup clients').
routed_sessions() {
  curl -fsS http://127.0.0.1:28080/metrics | awk '/^pulsar_proxy_sessions_total\{mode="routed"\}/ { printf "%d", $2 }'
}

stop() {
  local f
  for f in "$PEER_DIR"/pids/*; do
    [[ -f "$f" ]] || continue
    kill "$(cat "$f")" 2>/dev/null || true
    rm -f "$f"
  done
  rig down >/dev/null 2>&1 || rig down
}

main() {
  case "${1:-}" in
  prepare) prepare ;;
  run) shift; run "$@" ;;
  clients) shift; clients "$@" ;;
  *) echo "usage: peer.sh prepare | run [REGEX] [PAGE] | clients [PAGE]" >&2; exit 2 ;;
  esac
}
main "$@"
exit
