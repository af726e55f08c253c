#!/usr/bin/env bash
# The end-to-end test rig, all on 127.0.0.1, run from cached jars:
#   zookeeper  ZooKeeperServerMain: the metadata store, in its own JVM so it can be stopped alone
#   bookie     PulsarStandaloneStarter --no-broker --metadata-url zk:...: one bookie
#   broker1    PulsarBrokerStarter
#   broker2    PulsarBrokerStarter
#   consul     consul agent -dev
# RIG_BROKERS=1 leaves broker 2 out, RIG_CONSUL=0 Consul; RIG_CLUSTER names the cluster
# (default standalone): test/e2esni runs a second such rig as a second cluster.
# Both brokers are plain brokers on purpose: a standalone broker runs with runningStandalone=true
# and answers lookups of the other broker's topics with proxy_through_service_url=true, which
# sends clients back to itself ("Namespace bundle ... not served by this instance").
#
#   rig.sh prepare              fetch the Pulsar jars and build Consul into the cache (idempotent)
#   rig.sh up                   prepare, start everything, wait until it is really ready
#   rig.sh down                 stop what `up` started (SIGTERM, then SIGKILL) and remove its data
#   rig.sh status               show the processes and whether they answer
#   rig.sh stop-broker N        stop broker N (1 or 2) with SIGTERM, so its ZooKeeper session closes
#   rig.sh start-broker N       start broker N again and wait until it is ready
#   rig.sh kill-broker N        kill broker N with SIGKILL, as a crash: its ZooKeeper session
#                               stays until it expires (metadataStoreSessionTimeoutMillis)
#   rig.sh stop-consul          stop the Consul agent (a dev agent: its registrations are lost)
#   rig.sh start-consul         start the Consul agent again and wait for its leader
#   rig.sh stop-zookeeper       stop ZooKeeper alone (SIGTERM; its sessions survive a restart)
#   rig.sh start-zookeeper      start ZooKeeper again on its data and wait until it answers
#   rig.sh env                  print the state file
#   rig.sh java-flags HEAP LOGDIR LOGFILE   the brokers' JVM options, one per line (for other tools)
#   rig.sh classpath-file       the path of the file that holds the Pulsar classpath
#
# State goes to $RIG_DIR (default <repo>/.rigs/rig): rig.env (KEY=VALUE), pids/, conf/, data/,
# logs/. Every setting comes from an env var; see the settings block below.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
self="$here/$(basename "$0")"
# shellcheck source=common.sh
. "$here/common.sh"
PULSAR_VERSION="${RIG_PULSAR_VERSION:-$PULSAR_VERSION}"
export RIG_CACHE="$cache"
RIG_DIR="${RIG_DIR:-$rigs/rig}"
mkdir -p "$RIG_DIR"
RIG_DIR="$(cd "$RIG_DIR" && pwd)"
case "$RIG_DIR" in *[[:space:]]*) echo "rig: RIG_DIR must not contain spaces: $RIG_DIR" >&2; exit 2 ;; esac
export RIG_DIR

# ---- settings (env overrides) ----
HOST=127.0.0.1
# The name brokers advertise (and are known by: their ids); they still bind HOST. A client that
# checks the host name of a broker's certificate needs the name the certificate holds.
ADV_HOST="${RIG_ADVERTISED_ADDRESS:-$HOST}"
# The Pulsar cluster's name (test/e2esni runs two rigs, two clusters, for geo-replication).
CLUSTER="${RIG_CLUSTER:-standalone}"
# How many brokers (1 or 2; broker 2's settings are ignored with 1) and whether Consul runs
# (1 or 0): a second cluster for geo-replication needs one broker and no Consul.
BROKERS="${RIG_BROKERS:-2}"
CONSUL="${RIG_CONSUL:-1}"
case "$BROKERS$CONSUL" in 11 | 10 | 21 | 20) ;; *) echo "rig: RIG_BROKERS must be 1 or 2, RIG_CONSUL 1 or 0" >&2; exit 2 ;; esac
B1_PORT="${RIG_BROKER1_PORT:-16650}"
B1_HTTP_PORT="${RIG_BROKER1_HTTP_PORT:-18080}"
B2_PORT="${RIG_BROKER2_PORT:-16651}"
B2_HTTP_PORT="${RIG_BROKER2_HTTP_PORT:-18081}"
# TLS binary ports (brokerServicePortTls); empty = none. The certificate settings
# (tlsCertificateFilePath, tlsKeyFilePath) come from RIG_BROKER_EXTRA_CONF.
B1_TLS_PORT="${RIG_BROKER1_TLS_PORT:-}"
# TLS web service ports (webServicePortTls), same certificate settings; empty = none.
B1_WEB_TLS_PORT="${RIG_BROKER1_WEB_TLS_PORT:-}"
B2_WEB_TLS_PORT="${RIG_BROKER2_WEB_TLS_PORT:-}"
B2_TLS_PORT="${RIG_BROKER2_TLS_PORT:-}"
ZK_PORT="${RIG_ZK_PORT:-12181}"
# ZooKeeper's TLS port (secureClientPort, clients must present a certificate of the trust store);
# empty = none. RIG_ZK_TLS_KEYSTORE: PEM with its private key and certificate;
# RIG_ZK_TLS_TRUSTSTORE: PEM CA.
ZK_TLS_PORT="${RIG_ZK_TLS_PORT:-}"
ZK_TLS_KEYSTORE="${RIG_ZK_TLS_KEYSTORE:-}"
ZK_TLS_TRUSTSTORE="${RIG_ZK_TLS_TRUSTSTORE:-}"
BOOKIE_PORT="${RIG_BOOKIE_PORT:-13181}"
C_HTTP_PORT="${RIG_CONSUL_HTTP_PORT:-18500}"
C_DNS_PORT="${RIG_CONSUL_DNS_PORT:-18600}"
C_SERF_LAN_PORT="${RIG_CONSUL_SERF_LAN_PORT:-18301}"
C_SERF_WAN_PORT="${RIG_CONSUL_SERF_WAN_PORT:-18302}"
C_SERVER_PORT="${RIG_CONSUL_SERVER_PORT:-18300}"
C_GRPC_PORT="${RIG_CONSUL_GRPC_PORT:-18502}"
C_GRPC_TLS_PORT="${RIG_CONSUL_GRPC_TLS_PORT:-18503}"
BROKER_TIMEOUT="${RIG_BROKER_TIMEOUT:-240}" # seconds, per broker, from its start to ready
ZK_BOOKIE_TIMEOUT="${RIG_ZK_BOOKIE_TIMEOUT:-$BROKER_TIMEOUT}" # seconds, ZooKeeper + bookie start to ready (and start-zookeeper)
CONSUL_TIMEOUT="${RIG_CONSUL_TIMEOUT:-60}"
STOP_TIMEOUT="${RIG_STOP_TIMEOUT:-30}" # seconds between SIGTERM and SIGKILL
B1_HEAP="${RIG_BROKER1_HEAP:-1g}"
B2_HEAP="${RIG_BROKER2_HEAP:-768m}"
ZB_HEAP="${RIG_ZK_BOOKIE_HEAP:-384m}" # the bookie's (the name is older than the split)
ZK_HEAP="${RIG_ZK_HEAP:-128m}"
DIRECT_MEM="${RIG_BROKER_DIRECT_MEMORY:-1g}"
ZB_DIRECT_MEM="${RIG_ZK_BOOKIE_DIRECT_MEMORY:-256m}"
EXTRA_CONF="${RIG_BROKER_EXTRA_CONF:-}"  # a file whose lines are appended to both broker configs
# Per broker: a file appended after RIG_BROKER_EXTRA_CONF (e.g. a certificate of its own), and
# the host name it advertises (advertisedAddress, its URLs and id in rig.env): a name other
# than 127.0.0.1 must resolve to 127.0.0.1 for every process of the rig (test/e2esni mounts a
# hosts file of its own in a mount namespace).
B1_EXTRA_CONF="${RIG_BROKER1_EXTRA_CONF:-}"
B2_EXTRA_CONF="${RIG_BROKER2_EXTRA_CONF:-}"
B1_HOST="${RIG_BROKER1_HOST:-$HOST}"
B2_HOST="${RIG_BROKER2_HOST:-$HOST}"
# Brokers (1, 2 or "1 2") that run the Pulsar Functions worker in their JVM (thread runtime).
FUNCTIONS_WORKER="${RIG_FUNCTIONS_WORKER:-}"
# 1: both brokers run a transaction coordinator, its metadata set up as Pulsar's
# `pulsar initialize-transaction-coordinator-metadata` does, with this many coordinators.
TRANSACTIONS="${RIG_TRANSACTIONS:-0}"
TC_COUNT="${RIG_TRANSACTION_COORDINATORS:-4}"
JAVA_OPTS_EXTRA="${RIG_JAVA_OPTS:-}"     # extra JVM options for the rig's JVMs (split on spaces)
CONSUL_BIN="${RIG_CONSUL_BIN:-$cache/consul-$CONSUL_VERSION}"
CP_FILE="$cache/pulsar-$PULSAR_VERSION/classpath.txt"

STATE="$RIG_DIR/rig.env"
PIDS="$RIG_DIR/pids"
LOGS="$RIG_DIR/logs"
CONF="$RIG_DIR/conf"
DATA="$RIG_DIR/data"

log() { echo "rig: $*"; }
err() { echo "rig: $*" >&2; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1fs", b - a }'; }

broker_port() { if [[ "$1" == 1 ]]; then echo "$B1_PORT"; else echo "$B2_PORT"; fi; }
broker_host() { if [[ "$1" == 1 ]]; then echo "$B1_HOST"; else echo "$B2_HOST"; fi; }
broker_extra_conf() { if [[ "$1" == 1 ]]; then echo "$B1_EXTRA_CONF"; else echo "$B2_EXTRA_CONF"; fi; }
broker_tls_port() { if [[ "$1" == 1 ]]; then echo "$B1_TLS_PORT"; else echo "$B2_TLS_PORT"; fi; }
broker_tls_url() { if [[ -n "$(broker_tls_port "$1")" ]]; then echo "pulsar+ssl://$(broker_host "$1"):$(broker_tls_port "$1")"; fi; }
broker_web_tls_port() { if [[ "$1" == 1 ]]; then echo "$B1_WEB_TLS_PORT"; else echo "$B2_WEB_TLS_PORT"; fi; }
broker_https() { if [[ -n "$(broker_web_tls_port "$1")" ]]; then echo "https://$(broker_host "$1"):$(broker_web_tls_port "$1")"; fi; }
broker_http_port() { if [[ "$1" == 1 ]]; then echo "$B1_HTTP_PORT"; else echo "$B2_HTTP_PORT"; fi; }
broker_http() { echo "http://$(broker_host "$1"):$(broker_http_port "$1")"; }
# A broker's id: its own host name, else the name brokers advertise (RIG_ADVERTISED_ADDRESS).
broker_id() { local h; h="$(broker_host "$1")"; if [[ "$h" == "$HOST" ]]; then h="$ADV_HOST"; fi; echo "$h:$(broker_http_port "$1")"; }
# broker_numbers: the brokers this rig runs, "1 2" or "1".
broker_numbers() { if [[ "$BROKERS" == 1 ]]; then echo 1; else echo 1 2; fi; }

# ---- processes ----

# pid_is_ours PID: the process exists and its command line names this rig's state dir.
pid_is_ours() {
  local pid="$1"
  [[ -n "$pid" && "$pid" =~ ^[0-9]+$ && -r "/proc/$pid/cmdline" ]] || return 1
  tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF -e "$RIG_DIR/" -e "$RIG_DIR "
}
read_pid() { if [[ -f "$PIDS/$1.pid" ]]; then cat "$PIDS/$1.pid"; fi; }

# stop_pids NAME...: SIGTERM each recorded process of ours, wait up to STOP_TIMEOUT (or
# STOP_TIMEOUT_NOW), then SIGKILL. Names that needed SIGKILL are added to KILLED.
KILLED=()
stop_pids() {
  local name pid live=() names=() timeout="${STOP_TIMEOUT_NOW:-$STOP_TIMEOUT}"
  for name in "$@"; do
    pid="$(read_pid "$name")"
    if pid_is_ours "$pid"; then
      kill -TERM "$pid" 2>/dev/null || true
      live+=("$pid")
      names+=("$name")
    fi
    rm -f "$PIDS/$name.pid"
  done
  ((${#live[@]})) || return 0
  log "stopping ${names[*]} (SIGTERM ${live[*]})"
  local deadline=$(($(date +%s) + timeout)) any i
  while :; do
    any=0
    for pid in "${live[@]}"; do if pid_is_ours "$pid"; then any=1; fi; done
    ((any)) || break
    if (($(date +%s) >= deadline)); then
      for i in "${!live[@]}"; do
        if pid_is_ours "${live[$i]}"; then
          err "${names[$i]} (pid ${live[$i]}) still running after ${timeout}s: SIGKILL"
          kill -KILL "${live[$i]}" 2>/dev/null || true
          KILLED+=("${names[$i]}")
        fi
      done
      sleep 0.5
      break
    fi
    sleep 0.2
  done
}

port_in_use() {
  local p="$1"
  if command -v ss >/dev/null 2>&1; then
    ss -Hltun 2>/dev/null | awk '{print $5}' | grep -qE "[:.]$p\$"
  else
    (exec 3<>"/dev/tcp/$HOST/$p") 2>/dev/null
  fi
}

# rcurl: curl with the superuser token of an auth-enabled rig (RIG_ADMIN_TOKEN), read from a
# header file so the token never shows in a process list; kept across redirects to the other
# broker (another port of the same host, where curl would drop it).
rcurl() {
  if [[ -n "${RIG_ADMIN_TOKEN:-}" ]]; then
    curl --location-trusted -H @<(printf 'Authorization: Bearer %s\n' "$RIG_ADMIN_TOKEN") "$@"
  else
    curl "$@"
  fi
}
# http_get URL: the body on stdout; fails unless 2xx.
http_get() { rcurl -fsS --max-time 5 "$1" 2>/dev/null; }
# http_put URL JSON: fails unless 2xx or 409 (exists); follows redirects.
http_put() {
  local code
  code="$(rcurl -sS -L --max-time 20 -o /dev/null -w '%{http_code}' -X PUT -H 'Content-Type: application/json' \
    --data "$2" "$1" 2>/dev/null)" || return 1
  [[ "$code" == 2?? || "$code" == 409 ]]
}

# ---- java ----

# need_tools: java 17+ and curl on PATH, or a clear message and exit 2 (a missing tool).
need_tools() {
  local v
  command -v java >/dev/null 2>&1 ||
    { err "java is not on PATH; the rig runs Pulsar with a Java 17 or newer runtime (Debian: apt-get install openjdk-17-jre-headless)"; exit 2; }
  v="$(java_major)"
  [[ "$v" =~ ^[0-9]+$ ]] || { err "could not read the Java version from 'java -version' ($(command -v java))"; exit 2; }
  ((v >= 17)) || { err "java is version $v ($(command -v java)); Pulsar $PULSAR_VERSION needs Java 17 or newer"; exit 2; }
  command -v curl >/dev/null 2>&1 || { err "curl is not on PATH; the rig needs it for readiness checks"; exit 2; }
}

java_major() {
  local v
  v="$(java -version 2>&1 | sed -n 's/.*version "\([0-9][0-9.]*\).*/\1/p' | head -1)"
  v="${v#1.}"
  echo "${v%%.*}"
}

# cds_archive: the class-data-sharing archive for this JVM build and classpath. Mapping the
# classes of ~300 jars from it instead of loading them halves broker startup on two cores.
cds_archive() {
  local jv sum
  jv="$(java -version 2>&1 | sed -n 's/.*version "\([^"]*\)".*/\1/p' | head -1 | tr -c 'A-Za-z0-9._\n-' _)"
  sum="$(cksum <"$CP_FILE" | cut -d' ' -f1)"
  echo "$cache/cds/pulsar-$PULSAR_VERSION-java$jv-$sum.jsa"
}

# java_flags HEAP LOGDIR LOGFILE [ROLE [DIRECT_MEMORY]]: the JVM options of Pulsar's bin/pulsar and
# conf/pulsar_env.sh, resized for this machine, logging through log4j2.xml to LOGDIR/LOGFILE.
# They use the CDS archive when there is one; ROLE cds-trainer writes it as the JVM exits
# (RIG_CDS=0 turns CDS off).
java_flags() {
  local heap="$1" logdir="$2" logfile="$3" role="${4:-}" direct="${5:-$DIRECT_MEM}" jsa
  local f=(
    "-Xms$heap" "-Xmx$heap" "-XX:MaxDirectMemorySize=$direct"
    -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:+PerfDisableSharedMem
    -Djava.net.preferIPv4Stack=true -Djute.maxbuffer=10485760 -Dzookeeper.clientTcpKeepAlive=true
    --add-opens java.base/java.io=ALL-UNNAMED --add-opens java.base/java.util.zip=ALL-UNNAMED
    --add-opens java.management/sun.management=ALL-UNNAMED
    --add-opens jdk.management/com.sun.management.internal=ALL-UNNAMED
    --add-opens java.base/java.nio=ALL-UNNAMED --add-opens java.base/jdk.internal.misc=ALL-UNNAMED
    --add-opens java.base/jdk.internal.platform=ALL-UNNAMED
    --enable-native-access=ALL-UNNAMED
    -Dio.netty.tryReflectionSetAccessible=true
    -Dorg.apache.pulsar.shade.io.netty.tryReflectionSetAccessible=true
    -Dlog4j2.is.webapp=false -Dlog4j.shutdownHookEnabled=false
    -Dbookkeeper.metadata.bookie.drivers=org.apache.pulsar.metadata.bookkeeper.PulsarMetadataBookieDriver
    -Dbookkeeper.metadata.client.drivers=org.apache.pulsar.metadata.bookkeeper.PulsarMetadataClientDriver
    -Dpulsar.allocator.exit_on_oom=true -Dio.netty.recycler.maxCapacityPerThread=4096
    "-Dlog4j.configurationFile=$here/log4j2.xml" "-Dpulsar.log.dir=$logdir" "-Dpulsar.log.file=$logfile"
    "-Drig.dir=$RIG_DIR"
  )
  if (($(java_major) >= 23)); then f+=(--sun-misc-unsafe-memory-access=allow); fi
  if [[ "${RIG_CDS:-1}" != 0 && -s "$CP_FILE" ]]; then
    jsa="$(cds_archive)"
    if [[ -s "$jsa" ]]; then
      f+=("-XX:SharedArchiveFile=$jsa")
    elif [[ "$role" == cds-trainer ]]; then
      mkdir -p "$(dirname "$jsa")"
      # A name of this rig's own: two rigs started side by side may both train. Training
      # files a killed rig left behind go once they are three hours old.
      find "$(dirname "$jsa")" -maxdepth 1 -name "$(basename "$jsa").*.tmp" -mmin +180 -delete 2>/dev/null
      f+=("-XX:ArchiveClassesAtExit=$jsa.$$.tmp")
    fi
  fi
  # shellcheck disable=SC2206
  if [[ -n "$JAVA_OPTS_EXTRA" ]]; then f+=($JAVA_OPTS_EXTRA); fi
  printf '%s\n' "${f[@]}"
}

# common_conf BINARY_PORT HTTP_PORT: the keys both brokers (and the bookie process) share.
common_conf() {
  cat <<EOF
# Written by test/rig/rig.sh; the same cluster, load manager and quorum on both brokers.
clusterName=$CLUSTER
metadataStoreUrl=zk:$HOST:$ZK_PORT
configurationMetadataStoreUrl=zk:$HOST:$ZK_PORT
advertisedAddress=$ADV_HOST
bindAddress=$HOST
brokerServicePort=$1
webServicePort=$2
managedLedgerDefaultEnsembleSize=1
managedLedgerDefaultWriteQuorum=1
managedLedgerDefaultAckQuorum=1
loadManagerClassName=org.apache.pulsar.broker.loadbalance.impl.ModularLoadManagerImpl
loadBalancerEnabled=false
loadBalancerSheddingEnabled=false
loadBalancerAutoBundleSplitEnabled=false
loadBalancerAutoUnloadSplitBundlesEnabled=false
defaultNumberOfNamespaceBundles=4
transactionCoordinatorEnabled=$(if [[ "$TRANSACTIONS" == 1 ]]; then echo true; else echo false; fi)
# Pending-acknowledgement replays run on these single-threaded executors, a subscription's
# chosen by its hash; Pulsar 4.0.8's replay can spin forever on one (apache/pulsar#26368) and
# stall every subscription that lands there. Eight instead of one per core: a stuck one then
# holds up an eighth of new subscriptions, not half.
numTransactionReplayThreadPoolSize=8
allowAutoTopicCreation=true
allowAutoTopicCreationType=non-partitioned
brokerDeleteInactiveTopicsEnabled=false
functionsWorkerEnabled=false
webSocketServiceEnabled=false
brokerShutdownTimeoutMs=10000
EOF
}

write_confs() {
  local n
  for n in $(broker_numbers); do
    {
      common_conf "$(broker_port "$n")" "$(broker_http_port "$n")"
      if [[ -n "$(broker_tls_port "$n")" ]]; then echo "brokerServicePortTls=$(broker_tls_port "$n")"; fi
      if [[ -n "$(broker_web_tls_port "$n")" ]]; then echo "webServicePortTls=$(broker_web_tls_port "$n")"; fi
      if [[ -n "$EXTRA_CONF" ]]; then
        echo "# From RIG_BROKER_EXTRA_CONF=$EXTRA_CONF"
        cat "$EXTRA_CONF"
      fi
      if [[ "$(broker_host "$n")" != "$HOST" ]]; then echo "advertisedAddress=$(broker_host "$n")"; fi
      if [[ -n "$(broker_extra_conf "$n")" ]]; then
        echo "# From RIG_BROKER${n}_EXTRA_CONF=$(broker_extra_conf "$n")"
        cat "$(broker_extra_conf "$n")"
      fi
      if runs_worker "$n"; then echo "functionsWorkerEnabled=true"; fi
    } >"$CONF/broker$n.conf"
    if runs_worker "$n"; then functions_worker_conf "$n" >"$CONF/functions_worker$n.yml"; fi
  done
  {
    common_conf "$B1_PORT" "$B1_HTTP_PORT"
    cat <<EOF
# The bookie reads this same file as its ServerConfiguration. Pulsar's BKCluster (the
# standalone starter's bookie in metadata-store mode) keeps --bookkeeper-port only with
# allowEphemeralPorts=true; otherwise it takes a random free port.
allowEphemeralPorts=true
ledgerStorageClass=org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage
# An entry can be a whole 5 MiB message (a chunk of a chunked one) plus its headers: as
# Pulsar's own bookkeeper.conf, 5 MiB + 10 KiB (BookKeeper's default is 5 MiB).
nettyMaxFrameSizeBytes=5253120
journalSyncData=false
journalMaxGroupWaitMSec=1
allowLoopback=true
listeningInterface=lo
diskUsageThreshold=0.99
diskUsageWarnThreshold=0.98
gcWaitTime=300000
flushInterval=60000
dbStorage_writeCacheMaxSizeMb=32
dbStorage_readAheadCacheMaxSizeMb=32
dbStorage_rocksDB_blockCacheSize=16777216
EOF
  } >"$CONF/bookie.conf"
  cat >"$CONF/zookeeper.cfg" <<EOF
# Written by test/rig/rig.sh: a standalone ZooKeeper on loopback (sessions of 4 s to 40 s).
tickTime=2000
dataDir=$DATA/zookeeper
clientPort=$ZK_PORT
clientPortAddress=$HOST
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=*
EOF
  if [[ -n "$ZK_TLS_PORT" ]]; then
    # ssl.* keys become zookeeper.ssl.* properties; the server checks the client's chain,
    # not its address against the certificate.
    cat >>"$CONF/zookeeper.cfg" <<EOF
secureClientPort=$ZK_TLS_PORT
secureClientPortAddress=$HOST
ssl.keyStore.location=$ZK_TLS_KEYSTORE
ssl.keyStore.type=PEM
ssl.trustStore.location=$ZK_TLS_TRUSTSTORE
ssl.trustStore.type=PEM
ssl.clientAuth=need
ssl.hostnameVerification=false
EOF
  fi
}

# runs_worker N: broker N runs the Functions worker: RIG_FUNCTIONS_WORKER lists it when `up`
# writes the configs, which later commands (start-broker) go by.
runs_worker() { [[ " $FUNCTIONS_WORKER " == *" $1 "* || -f "$CONF/functions_worker$1.yml" ]]; }

# functions_worker_conf N: the worker settings of broker N (the broker fills in the cluster,
# ports, host name and metadata store from its own config). Functions run as threads in the
# broker's JVM; their packages are stored in the rig's bookie.
functions_worker_conf() {
  cat <<EOF
# Written by test/rig/rig.sh for broker $1.
pulsarFunctionsNamespace: public/functions
functionMetadataTopicName: metadata
clusterCoordinationTopicName: coordinate
functionAssignmentTopicName: assignments
numFunctionPackageReplicas: 1
downloadDirectory: $DATA/broker$1/functions-download
functionsDirectory: $DATA/broker$1/functions
connectorsDirectory: $DATA/broker$1/connectors
narExtractionDirectory: $DATA/broker$1/nar
uploadBuiltinSinksSources: false
functionRuntimeFactoryClassName: org.apache.pulsar.functions.runtime.thread.ThreadRuntimeFactory
functionRuntimeFactoryConfigs:
  threadGroupName: rig-functions
schedulerClassName: org.apache.pulsar.functions.worker.scheduler.RoundRobinScheduler
failureCheckFreqMs: 30000
rescheduleTimeoutMs: 60000
initialBrokerReconnectMaxRetries: 60
assignmentWriteMaxRetries: 60
instanceLivenessCheckFreqMs: 30000
topicCompactionFrequencySec: 1800
EOF
}

# launch NAME HEAP DIRECT ROLE MAIN [-DKEY=VALUE...] [--] ARGS...: starts a JVM from the Pulsar
# jars in the background in its own session (a ^C aimed at the caller does not reach it; `down`
# stops it) and records its pid. log4j output goes to logs/NAME.log, stdout and stderr to
# logs/NAME.out.
launch() {
  local name="$1" heap="$2" direct="$3" role="$4" main="$5" flags cp
  shift 5
  mapfile -t flags < <(java_flags "$heap" "$LOGS" "$name.log" "$role" "$direct")
  while [[ $# -gt 0 && "$1" == -D* ]]; do
    flags+=("$1")
    shift
  done
  [[ "${1:-}" == -- ]] && shift
  cp="$(cat "$CP_FILE")"
  mkdir -p "$DATA/$name"
  (cd "$DATA/$name" && exec setsid java "${flags[@]}" -cp "$cp" "$main" "$@" \
    >>"$LOGS/$name.out" 2>&1 </dev/null) &
  local pid=$! i
  echo "$pid" >"$PIDS/$name.pid"
  # The subshell becomes the JVM by exec; until it has, its command line is this script's,
  # which pid_is_ours does not recognise: on a loaded machine a start then looked like a
  # crash, and the broker it had started ran on, unknown to the rig.
  for ((i = 0; i < 200; i++)); do
    pid_is_ours "$pid" || ! kill -0 "$pid" 2>/dev/null && break
    sleep 0.05
  done
}

start_zookeeper() {
  local tls=()
  # TLS needs the Netty connection factory (it serves the plaintext port too).
  if grep -q '^secureClientPort=' "$CONF/zookeeper.cfg"; then
    tls=(-Dzookeeper.serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory)
  fi
  launch zookeeper "$ZK_HEAP" 64m "" org.apache.zookeeper.server.ZooKeeperServerMain \
    -Dzookeeper.snapshot.trust.empty=true -Dzookeeper.tcpKeepAlive=true "${tls[@]}" -- "$CONF/zookeeper.cfg"
}

# start_bookie: the standalone starter without a broker, on the running ZooKeeper (PIP-117's
# metadata-store mode: it creates the BookKeeper metadata under /ledgers when missing).
start_bookie() {
  launch bookie "$ZB_HEAP" "$ZB_DIRECT_MEM" "" org.apache.pulsar.PulsarStandaloneStarter -- \
    --config "$CONF/bookie.conf" --no-broker --metadata-url "zk:$HOST:$ZK_PORT" --bookkeeper-port "$BOOKIE_PORT" \
    --bookkeeper-dir "$DATA/bookkeeper" -nfw -nss
}

# zk_ok: ZooKeeper answers "imok" to ruok.
zk_ok() {
  [[ "$(exec 3<>"/dev/tcp/$HOST/$ZK_PORT" && printf ruok >&3 && timeout 2 cat <&3)" == imok ]]
}

# start_broker N: broker 1 also trains the class-data-sharing archive when there is none.
start_broker() {
  local n="$1" heap="$B2_HEAP" role=""
  if [[ "$n" == 1 ]]; then
    heap="$B1_HEAP"
    role=cds-trainer
  fi
  local args=(--broker-conf "$CONF/broker$n.conf")
  if runs_worker "$n"; then args+=(--functions-worker-conf "$CONF/functions_worker$n.yml"); fi
  launch "broker$n" "$heap" "$DIRECT_MEM" "$role" org.apache.pulsar.PulsarBrokerStarter -- "${args[@]}"
}

start_consul() {
  mkdir -p "$DATA/consul"
  (exec setsid "$CONSUL_BIN" agent -dev -node rig -client "$HOST" -bind "$HOST" -data-dir "$DATA/consul" \
    -http-port "$C_HTTP_PORT" -dns-port "$C_DNS_PORT" -serf-lan-port "$C_SERF_LAN_PORT" \
    -serf-wan-port "$C_SERF_WAN_PORT" -server-port "$C_SERVER_PORT" -grpc-port "$C_GRPC_PORT" \
    -grpc-tls-port "$C_GRPC_TLS_PORT" -log-level warn >>"$LOGS/consul.log" 2>&1 </dev/null) &
  echo $! >"$PIDS/consul.pid"
}

show_log_tail() { # NAME
  local f shown=0
  for f in "$LOGS/$1.log" "$LOGS/$1.out"; do
    if [[ -s "$f" ]]; then
      err "---- last 40 lines of $f ----"
      tail -n 40 "$f" >&2
      err "---- end of $f ----"
      shown=1
    fi
  done
  ((shown)) || err "$1 has written no log yet ($LOGS/$1.log, $LOGS/$1.out are empty)"
}

# wait_until DEADLINE WHAT PIDNAME CMD...: polls CMD until it succeeds; fails when the process
# PIDNAME (if not empty) dies or DEADLINE (epoch seconds) passes.
wait_until() {
  local deadline="$1" what="$2" pidname="$3"
  shift 3
  while ! "$@" >/dev/null 2>&1; do
    if [[ -n "$pidname" ]] && ! pid_is_ours "$(read_pid "$pidname")"; then
      err "$pidname exited while waiting for: $what"
      return 1
    fi
    if (($(date +%s) >= deadline)); then
      err "timed out waiting for: $what"
      return 1
    fi
    sleep 0.5
  done
}

broker_ready() { [[ "$(http_get "$(broker_http "$1")/admin/v2/brokers/ready")" == ok ]]; }
brokers_listed() { # N IDS...: broker N's view of the cluster lists every ID
  local body id n="$1"
  shift
  body="$(http_get "$(broker_http "$n")/admin/v2/brokers/$CLUSTER")" || return 1
  for id in "$@"; do grep -qF "\"$id\"" <<<"$body" || return 1; done
}
broker_unlisted() { # N ID: broker N's view no longer lists ID
  local body
  body="$(http_get "$(broker_http "$1")/admin/v2/brokers/$CLUSTER")" || return 1
  ! grep -qF "\"$2\"" <<<"$body"
}
# workers_listed: every running broker that runs a worker lists the workers of all of them.
workers_listed() {
  local n m body
  for n in 1 2; do
    runs_worker "$n" && pid_is_ours "$(read_pid "broker$n")" || continue
    body="$(http_get "$(broker_http "$n")/admin/v2/worker/cluster")" || return 1
    for m in 1 2; do
      if runs_worker "$m" && pid_is_ours "$(read_pid "broker$m")"; then grep -qF "\"port\":$(broker_http_port "$m")" <<<"$body" || return 1; fi
    done
  done
}
consul_leader() { local l; l="$(http_get "http://$HOST:$C_HTTP_PORT/v1/status/leader")" && [[ "$l" == \"?* ]]; }
# init_cluster: what the standalone would create, through broker 1's admin API (idempotent).
init_cluster() {
  local b
  b="$(broker_http 1)/admin/v2"
  http_put "$b/clusters/$CLUSTER" "{\"serviceUrl\":\"$(broker_http 1)\",\"brokerServiceUrl\":\"pulsar://$HOST:$B1_PORT\"}" &&
    http_put "$b/tenants/public" "{\"adminRoles\":[],\"allowedClusters\":[\"$CLUSTER\"]}" &&
    http_put "$b/namespaces/public/default" '{}' &&
    http_put "$b/tenants/pulsar" "{\"adminRoles\":[],\"allowedClusters\":[\"$CLUSTER\"]}" &&
    http_put "$b/namespaces/pulsar/system" '{}'
}
# txn_on: the brokers run transaction coordinators (RIG_TRANSACTIONS=1 when `up` wrote the
# configs, which later commands such as start-broker go by).
txn_on() { grep -qx 'transactionCoordinatorEnabled=true' "$CONF/broker1.conf" 2>/dev/null; }
# init_txn_metadata: what `pulsar initialize-transaction-coordinator-metadata` writes to the
# configuration store (tenant pulsar, namespace pulsar/system, the partitioned topic
# transaction_coordinator_assign with TC_COUNT partitions: one per coordinator), by the same class.
# It execs the JVM, so run in the background its pid is the JVM's.
init_txn_metadata() {
  local flags
  mapfile -t flags < <(java_flags 256m "$LOGS" txn-setup.log "" 256m)
  exec java "${flags[@]}" -cp "$(cat "$CP_FILE")" org.apache.pulsar.PulsarTransactionCoordinatorMetadataSetup \
    --cluster "$CLUSTER" --configuration-store "zk:$HOST:$ZK_PORT" \
    --initial-num-transaction-coordinators "$TC_COUNT" >>"$LOGS/txn-setup.out" 2>&1 </dev/null
}
# coordinators_ready N: every coordinator's topic looked up through broker N, which assigns its
# bundle to a broker; that broker loads the coordinator when a client first connects to it
# (TC_CLIENT_CONNECT_REQUEST: a broker loads coordinators only then).
coordinators_ready() {
  local i n
  n="$(state_get TRANSACTION_COORDINATORS)"
  [[ -n "$n" ]] || n="$TC_COUNT"
  for ((i = 0; i < n; i++)); do
    rcurl -fsS -L --max-time 20 "$(broker_http "$1")/lookup/v2/topic/persistent/pulsar/system/transaction_coordinator_assign-partition-$i" |
      grep -q '"brokerUrl"' || return 1
  done
}
topic_works() { # N: create a topic through broker N and look it up
  local t="persistent/public/default/rig-ready-$1"
  http_put "$(broker_http "$1")/admin/v2/$t" '' &&
    rcurl -fsS -L --max-time 20 "$(broker_http "$1")/lookup/v2/topic/$t" | grep -q '"brokerUrl"'
}

# set_state KEY VALUE: replace or add one line of rig.env.
set_state() {
  local tmp="$STATE.tmp"
  { grep -v "^$1=" "$STATE" 2>/dev/null || true; echo "$1=$2"; } >"$tmp"
  mv "$tmp" "$STATE"
}
state_get() { sed -n "s/^$1=//p" "$STATE" 2>/dev/null | tail -1; }

write_state() {
  cat >"$STATE" <<EOF
RIG_ID=$RIG_ID
RIG_DIR=$RIG_DIR
CLUSTER=$CLUSTER
BROKERS=$BROKERS
CONSUL=$CONSUL
PULSAR_VERSION=$PULSAR_VERSION
JAVA_CLASSPATH_FILE=$CP_FILE
LOG4J_CONFIG=$here/log4j2.xml
ZOOKEEPER=$HOST:$ZK_PORT
METADATA_STORE_URL=zk:$HOST:$ZK_PORT
ZOOKEEPER_TLS=$(if [[ -n "$ZK_TLS_PORT" ]]; then echo "$HOST:$ZK_TLS_PORT"; fi)
BOOKIE=$HOST:$BOOKIE_PORT
ZOOKEEPER_PID=$(read_pid zookeeper)
ZOOKEEPER_LOG=$LOGS/zookeeper.log
BOOKIE_PID=$(read_pid bookie)
BOOKIE_LOG=$LOGS/bookie.log
BROKER1_URL=pulsar://$B1_HOST:$B1_PORT
BROKER1_TLS_URL=$(broker_tls_url 1)
BROKER1_HTTPS=$(broker_https 1)
BROKER1_HTTP=$(broker_http 1)
BROKER1_ID=$(broker_id 1)
BROKER1_PID=$(read_pid broker1)
BROKER1_LOG=$LOGS/broker1.log
BROKER1_CONF=$CONF/broker1.conf
BROKER2_URL=pulsar://$B2_HOST:$B2_PORT
BROKER2_TLS_URL=$(broker_tls_url 2)
BROKER2_HTTPS=$(broker_https 2)
BROKER2_HTTP=$(broker_http 2)
BROKER2_ID=$(broker_id 2)
BROKER2_PID=$(read_pid broker2)
BROKER2_LOG=$LOGS/broker2.log
BROKER2_CONF=$CONF/broker2.conf
CONSUL_HTTP=$(if [[ "$CONSUL" == 1 ]]; then echo "http://$HOST:$C_HTTP_PORT"; fi)
CONSUL_ADDR=$(if [[ "$CONSUL" == 1 ]]; then echo "$HOST:$C_HTTP_PORT"; fi)
CONSUL_DNS=$(if [[ "$CONSUL" == 1 ]]; then echo "$HOST:$C_DNS_PORT"; fi)
CONSUL_PID=$(read_pid consul)
CONSUL_LOG=$LOGS/consul.log
WATCHDOG_PID=$(read_pid watchdog)
TRANSACTION_COORDINATORS=$(if txn_on; then echo "$TC_COUNT"; else echo 0; fi)
EOF
}

print_addresses() {
  cat <<EOF
rig: up ($RIG_DIR)
  broker 1   $(state_get BROKER1_URL)  $(state_get BROKER1_HTTP)  id $(state_get BROKER1_ID)  pid $(state_get BROKER1_PID)
  broker 2   $(state_get BROKER2_URL)  $(state_get BROKER2_HTTP)  id $(state_get BROKER2_ID)  pid $(state_get BROKER2_PID)
  consul     $(state_get CONSUL_HTTP)  pid $(state_get CONSUL_PID)
  zookeeper  $(state_get ZOOKEEPER)  pid $(state_get ZOOKEEPER_PID)  bookie $(state_get BOOKIE)  pid $(state_get BOOKIE_PID)  cluster $(state_get CLUSTER)
  state      $STATE
EOF
}

# ---- commands ----

cmd_prepare() {
  local t0 rc1=0 rc2=0 p1 p2
  t0="$(now)"
  # Independent: network-bound Maven and CPU-bound go build run side by side.
  "$here/fetch-pulsar.sh" &
  p1=$!
  "$here/build-consul.sh" &
  p2=$!
  wait "$p1" || rc1=$?
  wait "$p2" || rc2=$?
  ((rc1 == 0)) || { err "fetching the Pulsar jars failed (exit $rc1)"; return "$rc1"; }
  ((rc2 == 0)) || { err "building Consul failed (exit $rc2)"; return "$rc2"; }
  log "phase prepare: $(since "$t0")"
}

# stop_all stops the brokers and consul, then the bookie, then ZooKeeper. Broker 1 may be writing
# the CDS archive as it exits: it gets longer, and the archive is kept only if it exited by itself.
stop_all() {
  local b1 tmp="" k
  b1="$(read_pid broker1)"
  if pid_is_ours "$b1"; then
    tmp="$(tr '\0' '\n' <"/proc/$b1/cmdline" | sed -n 's/^-XX:ArchiveClassesAtExit=//p')"
  fi
  if [[ -n "$tmp" ]]; then
    log "broker 1 writes the class-data-sharing archive as it exits (once per JVM and classpath)"
    STOP_TIMEOUT_NOW=$((STOP_TIMEOUT > 120 ? STOP_TIMEOUT : 120)) stop_pids broker2 broker1 consul
    for k in "${KILLED[@]}"; do if [[ "$k" == broker1 ]]; then rm -f "$tmp"; fi; done
    if [[ -s "$tmp" ]]; then
      mv -f "$tmp" "${tmp%.*.tmp}"
      log "CDS archive: ${tmp%.*.tmp}"
    fi
  else
    stop_pids broker2 broker1 consul
  fi
  stop_pids txn-setup bookie
  stop_pids zookeeper
}

rig_is_up() {
  local n
  for n in zookeeper bookie broker1 broker2 consul; do
    if pid_is_ours "$(read_pid "$n")"; then return 0; fi
  done
  return 1
}

# fail_up MSG [NAME]: show NAME's log, stop everything, exit 1.
fail_up() {
  err "$1"
  if [[ -n "${2:-}" ]]; then show_log_tail "$2"; fi
  err "startup failed; stopping what was started"
  stop_pids watchdog
  stop_all
  exit 1
}

# rig_ports: every port `up` opens (broker 2's and Consul's only when they run).
rig_ports() {
  echo "$B1_PORT" "$B1_HTTP_PORT" $B1_TLS_PORT $B1_WEB_TLS_PORT "$ZK_PORT" $ZK_TLS_PORT "$BOOKIE_PORT"
  if [[ "$BROKERS" == 2 ]]; then echo "$B2_PORT" "$B2_HTTP_PORT" $B2_TLS_PORT $B2_WEB_TLS_PORT; fi
  if [[ "$CONSUL" == 1 ]]; then
    echo "$C_HTTP_PORT" "$C_DNS_PORT" "$C_SERF_LAN_PORT" "$C_SERF_WAN_PORT" "$C_SERVER_PORT" "$C_GRPC_PORT" "$C_GRPC_TLS_PORT"
  fi
}

cmd_up() {
  local t_all t0 p taken=() deadline
  t_all="$(now)"
  if rig_is_up; then
    err "a rig is already running in $RIG_DIR (rig.sh down first; or set $RIG_DIR/rig.env in PULSAR_PROXY_RIG to use it)"
    exit 1
  fi
  need_tools
  # Ports first: a clash is reported before any download or build.
  for p in $(rig_ports); do
    if port_in_use "$p"; then taken+=("$p"); fi
  done
  if ((${#taken[@]})); then
    err "port(s) already in use on this machine: ${taken[*]}"
    err "(set RIG_BROKER{1,2}_PORT, RIG_BROKER{1,2}_HTTP_PORT, RIG_ZK_PORT, RIG_BOOKIE_PORT, RIG_CONSUL_*_PORT)"
    if command -v ss >/dev/null 2>&1; then
      for p in "${taken[@]}"; do ss -Hltunp 2>/dev/null | awk -v p=":$p\$" '$5 ~ p' >&2; done
    fi
    exit 1
  fi
  cmd_prepare

  rm -rf "$DATA" "$CONF" "$PIDS" "$LOGS" "$STATE"
  mkdir -p "$DATA" "$CONF" "$PIDS" "$LOGS"
  RIG_ID="$(date +%s)-$$-$RANDOM"
  write_confs
  trap 'fail_up "interrupted"' INT TERM

  t0="$(now)"
  deadline=$(($(date +%s) + ZK_BOOKIE_TIMEOUT))
  start_zookeeper
  if [[ "$CONSUL" == 1 ]]; then start_consul; fi
  log "started ZooKeeper :$ZK_PORT (pid $(read_pid zookeeper))$(if [[ "$CONSUL" == 1 ]]; then echo ", consul (pid $(read_pid consul))"; fi)"
  wait_until "$deadline" "ZooKeeper (port $ZK_PORT) answering ruok" zookeeper zk_ok ||
    fail_up "ZooKeeper did not come up within ${ZK_BOOKIE_TIMEOUT}s" zookeeper
  start_bookie
  log "started the bookie :$BOOKIE_PORT (pid $(read_pid bookie))"
  # The brokers need the ledger metadata; the bookie port opens after it is written.
  wait_until "$deadline" "the bookie (port $BOOKIE_PORT)" bookie port_in_use "$BOOKIE_PORT" ||
    fail_up "the bookie did not come up within ${ZK_BOOKIE_TIMEOUT}s" bookie
  log "phase zookeeper+bookie: $(since "$t0")"
  local txn_setup=""
  if [[ "$TRANSACTIONS" == 1 ]]; then
    # Metadata only, straight into ZooKeeper: it runs beside the brokers' startup.
    init_txn_metadata &
    txn_setup=$!
    echo "$txn_setup" >"$PIDS/txn-setup.pid"
  fi
  start_broker 1
  if runs_worker 1 && runs_worker 2; then
    # Two Functions workers starting at once race for their coordination subscription (the
    # loser fails its broker with "Subscription Busy"): broker 2 starts once broker 1 is up.
    log "started broker 1 (pid $(read_pid broker1)); broker 2 follows once it is ready (both run a Functions worker)"
    wait_until "$(($(date +%s) + BROKER_TIMEOUT))" "broker 1 /admin/v2/brokers/ready" broker1 broker_ready 1 ||
      fail_up "broker 1 not ready within ${BROKER_TIMEOUT}s" broker1
  fi
  if [[ "$BROKERS" == 2 ]]; then start_broker 2; fi
  log "started broker 1 (pid $(read_pid broker1))$(if [[ "$BROKERS" == 2 ]]; then echo " and broker 2 (pid $(read_pid broker2))"; fi)"

  if [[ "$CONSUL" == 1 ]]; then
    wait_until "$(($(date +%s) + CONSUL_TIMEOUT))" "consul leader on :$C_HTTP_PORT" consul consul_leader ||
      fail_up "consul did not elect itself leader" consul
    log "phase consul: $(since "$t0")"
  fi

  deadline=$(($(date +%s) + BROKER_TIMEOUT))
  wait_until "$deadline" "broker 1 /admin/v2/brokers/ready" broker1 broker_ready 1 ||
    fail_up "broker 1 not ready within ${BROKER_TIMEOUT}s" broker1
  log "phase broker 1 ready: $(since "$t0")"
  if [[ "$BROKERS" == 2 ]]; then
    wait_until "$deadline" "broker 2 /admin/v2/brokers/ready" broker2 broker_ready 2 ||
      fail_up "broker 2 not ready within ${BROKER_TIMEOUT}s" broker2
    log "phase broker 2 ready: $(since "$t0")"
  fi

  if [[ -n "$txn_setup" ]]; then
    wait "$txn_setup" || fail_up "initialize-transaction-coordinator-metadata failed (exit $?; $LOGS/txn-setup.out)" txn-setup
    rm -f "$PIDS/txn-setup.pid"
    log "phase transaction coordinator metadata ($TC_COUNT coordinators): $(since "$t0")"
  fi
  wait_until "$deadline" "cluster $CLUSTER, tenants public and pulsar, namespaces public/default and pulsar/system" broker1 init_cluster ||
    fail_up "could not create the cluster metadata through broker 1" broker1
  local n ids=()
  for n in $(broker_numbers); do ids+=("$(broker_id "$n")"); done
  for n in $(broker_numbers); do
    wait_until "$deadline" "every broker in broker $n's /admin/v2/brokers/$CLUSTER" "broker$n" brokers_listed "$n" "${ids[@]}" ||
      fail_up "the brokers do not see each other" "broker$n"
  done
  for n in $(broker_numbers); do
    wait_until "$deadline" "a topic created and looked up through broker $n" "broker$n" topic_works "$n" ||
      fail_up "topics cannot be created through broker $n" "broker$n"
  done
  if runs_worker 1 || runs_worker 2; then
    wait_until "$deadline" "the Functions workers to see each other" broker1 workers_listed ||
      fail_up "the Functions workers did not form a cluster" broker1
  fi
  if txn_on; then
    wait_until "$deadline" "an owner for each of the $TC_COUNT transaction coordinators" broker1 coordinators_ready 1 ||
      fail_up "the transaction coordinators got no owner" broker1
  fi
  log "phase cluster checks: $(since "$t0")"

  if [[ -n "${RIG_OWNER_PID:-}" ]]; then
    # A watchdog that tears the rig down when its owner (e.g. a test binary) dies without doing so.
    # shellcheck disable=SC2016
    (exec setsid bash -c 'owner=$1; self=$2; id=$3; while kill -0 "$owner" 2>/dev/null; do sleep 1; done
      RIG_EXPECT_ID=$id exec "$self" down' rig-watchdog "$RIG_OWNER_PID" "$self" "$RIG_ID" "$RIG_DIR" \
      >>"$LOGS/watchdog.log" 2>&1 </dev/null) &
    echo $! >"$PIDS/watchdog.pid"
  fi
  trap - INT TERM
  write_state
  print_addresses
  log "phase total up: $(since "$t_all")"
}

cmd_down() {
  if [[ -n "${RIG_EXPECT_ID:-}" && -f "$STATE" && "$(state_get RIG_ID)" != "$RIG_EXPECT_ID" ]]; then
    log "the rig in $RIG_DIR is not $RIG_EXPECT_ID; leaving it alone"
    return 0
  fi
  local t0
  t0="$(now)"
  if [[ "$(read_pid watchdog)" == "$$" ]]; then rm -f "$PIDS/watchdog.pid"; else stop_pids watchdog; fi
  stop_all
  rm -rf "$DATA" "$CONF" "$PIDS" "$STATE"
  log "down ($(since "$t0")); logs kept in $LOGS"
}

cmd_status() {
  local n pid rc=0
  if [[ ! -f "$STATE" ]]; then
    log "no rig state in $RIG_DIR"
    if rig_is_up; then
      err "but some of its processes are running; rig.sh down stops them"
      return 1
    fi
    return 3
  fi
  for n in zookeeper bookie $(for n in $(broker_numbers); do echo "broker$n"; done) $(if [[ "$CONSUL" == 1 ]]; then echo consul; fi) watchdog; do
    pid="$(read_pid "$n")"
    if pid_is_ours "$pid"; then
      echo "  $n: running (pid $pid)"
    elif [[ "$n" != watchdog ]]; then
      echo "  $n: stopped"
      rc=1
    fi
  done
  for n in $(broker_numbers); do
    if broker_ready "$n"; then echo "  broker $n: ready"; else echo "  broker $n: not answering"; rc=1; fi
  done
  if [[ "$CONSUL" == 0 ]]; then
    echo "  consul: not part of this rig (RIG_CONSUL=0)"
  elif consul_leader; then echo "  consul: leader elected"; else echo "  consul: not answering"; rc=1; fi
  print_addresses
  return "$rc"
}

need_state() { [[ -f "$STATE" ]] || { err "no rig state in $RIG_DIR (rig.sh up first)"; exit 1; }; }
check_broker_arg() {
  case "${1:-}" in
    1 | 2) ;;
    *) err "usage: rig.sh stop-broker|start-broker|kill-broker 1|2"; exit 2 ;;
  esac
  if [[ "$1" == 2 && "$BROKERS" == 1 ]]; then err "this rig runs one broker (RIG_BROKERS=1)"; exit 2; fi
}

cmd_stop_broker() {
  local n="$1" other t0
  check_broker_arg "$n"
  need_state
  other=$((3 - n))
  t0="$(now)"
  stop_pids "broker$n"
  set_state "BROKER${n}_PID" ""
  # A clean SIGTERM closes its ZooKeeper session; wait until the other broker stops listing it.
  if pid_is_ours "$(read_pid "broker$other")"; then
    wait_until "$(($(date +%s) + STOP_TIMEOUT))" "broker $other to drop $(broker_id "$n") from its list" "" \
      broker_unlisted "$other" "$(broker_id "$n")" ||
      err "broker $other still lists $(broker_id "$n") (its ZooKeeper session expires within 30s)"
  fi
  log "broker $n stopped ($(since "$t0"))"
}

cmd_kill_broker() {
  local n="$1" pid
  check_broker_arg "$n"
  need_state
  pid="$(read_pid "broker$n")"
  if ! pid_is_ours "$pid"; then
    err "broker $n is not running"
    exit 1
  fi
  kill -KILL "$pid"
  while pid_is_ours "$pid"; do sleep 0.05; done
  rm -f "$PIDS/broker$n.pid"
  set_state "BROKER${n}_PID" ""
  log "broker $n killed (SIGKILL $pid)"
}

# start_broker_ready N: starts broker N and waits until it is ready, or exits 1. A broker that
# exits while starting is started again, at most twice, five seconds apart, with the first
# error of its output logged. Pulsar's own start fails now and then on a loaded machine: its
# Functions worker gives up when the other broker, itself just restarted, answers a read of
# the assignment topic after 30 s; or a port is taken between the check and the bind.
start_broker_ready() {
  local n="$1" attempt mark
  for attempt in 1 2 3; do
    mark="$(wc -c <"$LOGS/broker$n.out" 2>/dev/null || echo 0)"
    start_broker "$n"
    log "started broker $n (pid $(read_pid "broker$n"))"
    if wait_until "$(($(date +%s) + BROKER_TIMEOUT))" "broker $n /admin/v2/brokers/ready" "broker$n" broker_ready "$n"; then
      return 0
    fi
    if ((attempt == 3)) || pid_is_ours "$(read_pid "broker$n")"; then
      break # the last attempt, or still running but not ready in time
    fi
    log "broker $n exited while starting: $(tail -c +"$((mark + 1))" "$LOGS/broker$n.out" 2>/dev/null |
      grep -m1 -E 'Exception|Error' | cut -c1-300); starting it again"
    sleep 5
  done
  show_log_tail "broker$n"
  stop_pids "broker$n"
  err "broker $n did not become ready within ${BROKER_TIMEOUT}s"
  exit 1
}

cmd_start_broker() {
  local n="$1" t0 p ids=()
  check_broker_arg "$n"
  need_state
  need_tools
  if pid_is_ours "$(read_pid "broker$n")"; then
    log "broker $n is already running"
    return 0
  fi
  for p in "$(broker_port "$n")" "$(broker_http_port "$n")" $(broker_tls_port "$n") $(broker_web_tls_port "$n"); do
    if port_in_use "$p"; then
      err "port $p is still in use; cannot start broker $n"
      exit 1
    fi
  done
  t0="$(now)"
  start_broker_ready "$n"
  for p in 1 2; do
    if pid_is_ours "$(read_pid "broker$p")"; then ids+=("$(broker_id "$p")"); fi
  done
  # Every running broker's view must list every running broker.
  for p in 1 2; do
    if pid_is_ours "$(read_pid "broker$p")" &&
      ! wait_until "$(($(date +%s) + BROKER_TIMEOUT))" "broker $p to list ${ids[*]}" "broker$n" brokers_listed "$p" "${ids[@]}"; then
      show_log_tail "broker$n"
      err "broker $n did not register"
      exit 1
    fi
  done
  if runs_worker "$n" && ! wait_until "$(($(date +%s) + BROKER_TIMEOUT))" "the Functions workers to see each other" "broker$n" workers_listed; then
    show_log_tail "broker$n"
    err "the Functions worker of broker $n did not join the others"
    exit 1
  fi
  if txn_on && ! wait_until "$(($(date +%s) + BROKER_TIMEOUT))" "an owner for each transaction coordinator" "broker$n" coordinators_ready "$n"; then
    show_log_tail "broker$n"
    err "the transaction coordinators have no owner after broker $n started"
    exit 1
  fi
  set_state "BROKER${n}_PID" "$(read_pid "broker$n")"
  log "broker $n ready ($(since "$t0"))"
}

cmd_stop_consul() {
  need_state
  stop_pids consul
  set_state CONSUL_PID ""
  log "consul stopped"
}

cmd_start_consul() {
  local t0
  need_state
  if pid_is_ours "$(read_pid consul)"; then
    log "consul is already running"
    return 0
  fi
  if port_in_use "$C_HTTP_PORT"; then
    err "port $C_HTTP_PORT is still in use; cannot start consul"
    exit 1
  fi
  t0="$(now)"
  start_consul
  if ! wait_until "$(($(date +%s) + CONSUL_TIMEOUT))" "consul leader on :$C_HTTP_PORT" consul consul_leader; then
    show_log_tail consul
    stop_pids consul
    err "consul did not elect itself leader within ${CONSUL_TIMEOUT}s"
    exit 1
  fi
  set_state CONSUL_PID "$(read_pid consul)"
  log "consul ready ($(since "$t0"))"
}

# ZooKeeper alone: the brokers and the bookie keep running on what they have (a broker's
# session survives an outage shorter than its timeout, since the server restores sessions from
# its log and restarts their clocks) and reconnect by themselves.
cmd_stop_zookeeper() {
  need_state
  stop_pids zookeeper
  set_state ZOOKEEPER_PID ""
  log "zookeeper stopped"
}

cmd_start_zookeeper() {
  local t0
  need_state
  if pid_is_ours "$(read_pid zookeeper)"; then
    log "zookeeper is already running"
    return 0
  fi
  if port_in_use "$ZK_PORT"; then
    err "port $ZK_PORT is still in use; cannot start zookeeper"
    exit 1
  fi
  t0="$(now)"
  start_zookeeper
  if ! wait_until "$(($(date +%s) + ZK_BOOKIE_TIMEOUT))" "ZooKeeper (port $ZK_PORT) answering ruok" zookeeper zk_ok; then
    show_log_tail zookeeper
    stop_pids zookeeper
    err "zookeeper did not answer within ${ZK_BOOKIE_TIMEOUT}s"
    exit 1
  fi
  set_state ZOOKEEPER_PID "$(read_pid zookeeper)"
  log "zookeeper ready ($(since "$t0"))"
}

case "${1:-}" in
  prepare) cmd_prepare ;;
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  env)
    need_state
    cat "$STATE"
    ;;
  stop-broker) cmd_stop_broker "${2:-}" ;;
  start-broker) cmd_start_broker "${2:-}" ;;
  kill-broker) cmd_kill_broker "${2:-}" ;;
  stop-consul) cmd_stop_consul ;;
  start-consul) cmd_start_consul ;;
  stop-zookeeper) cmd_stop_zookeeper ;;
  start-zookeeper) cmd_start_zookeeper ;;
  java-flags)
    [[ $# -ge 4 ]] || { err "usage: rig.sh java-flags HEAP LOGDIR LOGFILE"; exit 2; }
    java_flags "$2" "$3" "$4"
    ;;
  classpath-file) echo "$CP_FILE" ;;
  *)
    sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
