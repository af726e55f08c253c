package e2esni

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/pulsar-proxy/pulsar-proxy/test/proxyproc"
	"github.com/pulsar-proxy/pulsar-proxy/test/rig"
)

// The tenant and namespace replicated from cluster A to cluster B.
const (
	geoTenant    = "geo"
	geoNamespace = geoTenant + "/rep"
)

// Geo-replication from cluster A to cluster B through the SNI listener: cluster B is
// registered in A's metadata with its TLS service URL under B's service name, a client
// certificate for A's brokers, and proxyServiceUrl = the proxy's SNI listener with
// proxyProtocol SNI. Messages produced on A arrive on B. The proof that they went through
// the proxy: A's replicator is connected to the proxy's listener (its stats name the remote
// end), the replicator's producer on B comes from a socket of the proxy process, B saw A's
// certificate role (the TLS ended at B, not at the proxy), and the proxy relayed B's service
// name and broker name.
func TestGeoReplicationThroughSNI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	p := startSNIProxyFor(t, rigB, serviceBName, "", brokerBTLSPort)
	registerClusters(ctx, t, p)
	topic := "persistent://" + geoNamespace + "/" + rig.UniqueName("geo")
	// B keeps what arrives for this subscription from the moment it exists.
	if err := rigB.CreateSubscription(ctx, topic, "geo"); err != nil {
		t.Fatal(err)
	}
	const count = 50
	sent := produce(ctx, t, theRig.BrokerURL(1), topic, count)
	got := consume(ctx, t, rigB.BrokerURL(1), topic, "geo", count)
	for i := range sent {
		if got[i] != sent[i] {
			t.Fatalf("message %d on B is %q, sent %q on A", i, got[i], sent[i])
		}
	}
	checkThroughProxy(ctx, t, p, topic)
	logRigMemory(t)
}

// registerClusters registers B in A's metadata (through the proxy) and A in B's (directly: B
// replicates nothing to A here), and the replicated tenant and namespace on both.
func registerClusters(ctx context.Context, t *testing.T, p *proxyproc.Proc) {
	t.Helper()
	a := ca.Client(t, clusterA) // A's brokers' identity at B
	must(t, theRig.Admin(ctx, http.MethodPut, "/admin/v2/clusters/"+clusterB, map[string]any{
		"serviceUrl":                      rigB.BrokerHTTP(1),
		"brokerServiceUrlTls":             "pulsar+ssl://" + serviceBName + ":" + brokerBTLSPort,
		"brokerClientTlsEnabled":          true,
		"brokerClientTrustCertsFilePath":  ca.CertFile,
		"brokerClientCertificateFilePath": a.CertFile,
		"brokerClientKeyFilePath":         a.KeyFile,
		"authenticationPlugin":            "org.apache.pulsar.client.impl.auth.AuthenticationTls",
		"authenticationParameters":        "tlsCertFile:" + a.CertFile + ",tlsKeyFile:" + a.KeyFile,
		"proxyServiceUrl":                 "pulsar+ssl://" + p.SNIAddr,
		"proxyProtocol":                   "SNI",
	}, nil))
	must(t, rigB.Admin(ctx, http.MethodPut, "/admin/v2/clusters/"+clusterA, map[string]any{
		"serviceUrl": theRig.BrokerHTTP(1), "brokerServiceUrl": theRig.BrokerURL(1),
	}, nil))
	both := []string{clusterA, clusterB}
	for _, r := range []*rig.Rig{theRig, rigB} {
		must(t, r.Admin(ctx, http.MethodPut, "/admin/v2/tenants/"+geoTenant, map[string]any{"adminRoles": []string{}, "allowedClusters": both}, nil))
		must(t, r.Admin(ctx, http.MethodPut, "/admin/v2/namespaces/"+geoNamespace, map[string]any{}, nil))
		must(t, r.Admin(ctx, http.MethodPost, "/admin/v2/namespaces/"+geoNamespace+"/replication", both, nil))
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil && !rig.IsStatus(err, http.StatusConflict) {
		t.Fatal(err)
	}
}

// produce sends count messages to topic on a broker of cluster A (plain, directly: the
// replication is what crosses the proxy) and returns their payloads in order.
func produce(ctx context.Context, t *testing.T, url, topic string, count int) []string {
	t.Helper()
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: url, OperationTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	prod, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	var sent []string
	for i := 0; i < count; i++ {
		payload := fmt.Sprintf("geo-%d-%d", i, time.Now().UnixNano())
		if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(payload)}); err != nil {
			t.Fatalf("send %d on A: %v", i, err)
		}
		sent = append(sent, payload)
	}
	return sent
}

// consume receives count messages from sub on topic on cluster B's broker.
func consume(ctx context.Context, t *testing.T, url, topic, sub string, count int) []string {
	t.Helper()
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: url, OperationTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: sub})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	var got []string
	for len(got) < count {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("received %d of %d replicated messages on B: %v", len(got), count, err)
		}
		got = append(got, string(m.Payload()))
		cons.Ack(m)
	}
	return got
}

// checkThroughProxy proves the replication went through the proxy p (see the test's comment).
func checkThroughProxy(ctx context.Context, t *testing.T, p *proxyproc.Proc, topic string) {
	t.Helper()
	var statsA struct {
		Replication map[string]struct {
			Connected          bool   `json:"connected"`
			OutboundConnection string `json:"outboundConnection"`
		} `json:"replication"`
	}
	stA, err := theRig.TopicStats(ctx, topic)
	must(t, err)
	json.Unmarshal(stA.Raw, &statsA)
	repl := statsA.Replication[clusterB]
	_, proxyPort, _ := strings.Cut(p.SNIAddr, ":")
	// Netty's channel description: "[id: 0x…, L:/127.0.0.1:56674 - R:127.0.0.1/127.0.0.1:45053]".
	if !repl.Connected || !strings.HasSuffix(strings.TrimSuffix(repl.OutboundConnection, "]"), ":"+proxyPort) {
		t.Errorf("A's replicator to %s: connected %v, outbound connection %q; want connected to the proxy's %s",
			clusterB, repl.Connected, repl.OutboundConnection, p.SNIAddr)
	}
	t.Logf("A's replicator to %s: outbound connection %s (the proxy's SNI listener is %s)", clusterB, repl.OutboundConnection, p.SNIAddr)
	checkReplicatorAtB(ctx, t, p, topic)
	for match, least := range map[string]float64{"service": 1, "broker": 1} {
		if v := metric(t, p, "pulsar_proxy_sni_relayed_total", `match="`+match+`"`); v < least {
			t.Errorf("relayed{match=%s} = %v, want at least %v", match, v, least)
		}
	}
	t.Logf("proxy: bytes to B %v, from B %v", metric(t, p, "pulsar_proxy_sni_bytes_total", `direction="to_broker"`),
		metric(t, p, "pulsar_proxy_sni_bytes_total", `direction="to_client"`))
}

// checkReplicatorAtB finds A's replicator in the stats of B's topic: its connection to B
// must be a socket that the proxy process holds, and B's broker must have authenticated it
// as A's certificate role (its log's "connected with role=" line for that address).
func checkReplicatorAtB(ctx context.Context, t *testing.T, p *proxyproc.Proc, topic string) {
	t.Helper()
	var statsB struct {
		Replication map[string]struct {
			InboundConnection string `json:"inboundConnection"`
		} `json:"replication"`
	}
	stB, err := rigB.TopicStats(ctx, topic)
	must(t, err)
	json.Unmarshal(stB.Raw, &statsB)
	from := statsB.Replication[clusterA].InboundConnection // "/127.0.0.1:59512"
	if from == "" {
		t.Fatalf("B's topic names no inbound replication from %s: %s", clusterA, stB.Raw)
	}
	port, _ := strconv.Atoi(from[strings.LastIndexByte(from, ':')+1:])
	owned, err := holdsSocket(p.PID(), port)
	if err != nil {
		t.Fatal(err)
	}
	if !owned {
		t.Errorf("A's replicator reaches B from %s, a socket the proxy (pid %d) does not hold", from, p.PID())
	}
	log, err := os.ReadFile(rigB.State("BROKER1_LOG"))
	must(t, err)
	want := "[" + from + "] connected with role=" + clusterA + " using authMethod=tls"
	if !strings.Contains(string(log), want) {
		t.Errorf("B's broker log has no %q: the replicator did not authenticate with A's certificate at B", want)
	}
	t.Logf("B: replication from %s arrives from %s (held by the proxy: %v), authenticated as %s", clusterA, from, owned, clusterA)
}

// logRigMemory logs the resident size of every JVM of both rigs (and their sum).
func logRigMemory(t *testing.T) {
	var total int
	var parts []string
	for _, r := range []*rig.Rig{theRig, rigB} {
		for _, name := range []string{"ZOOKEEPER", "BOOKIE", "BROKER1", "BROKER2"} {
			pid := r.State(name + "_PID")
			if pid == "" {
				continue
			}
			kb := rssKiB(pid)
			total += kb
			parts = append(parts, fmt.Sprintf("%s/%s %d MiB", r.Cluster, strings.ToLower(name), kb/1024))
		}
	}
	t.Logf("rig memory (RSS): %s; total %d MiB", strings.Join(parts, ", "), total/1024)
}

// rssKiB is VmRSS of a process, in KiB (0 when unreadable).
func rssKiB(pid string) int {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return kb
		}
	}
	return 0
}
