package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/certs"
)

// brokerTLSURLs are the rig brokers' TLS endpoints (pulsar+ssl://127.0.0.1:port).
func brokerTLSURLs(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, b := range theRig.Brokers {
		if b.TLSURL == "" {
			t.Fatalf("broker %d has no TLS port: the rig was started without RIG_BROKER%d_TLS_PORT (an attached rig must be started by test/e2e)", b.N, b.N)
		}
		out = append(out, b.TLSURL)
	}
	return out
}

// brokerTLSYAML turns TLS towards brokers on, trusting the rig's CA and presenting the
// client certificate the rig's brokers require, plus more YAML under broker:.
func brokerTLSYAML(more string) string {
	cert, key := rigProxyCert()
	return fmt.Sprintf("broker:\n  tls:\n    enabled: true\n    trustCertsFile: %q\n    certFile: %q\n    keyFile: %q\n%s",
		rigCA(), cert, key, more)
}

// lookupAnswer asks the proxy at addr (lookup mode) for topic's owner.
func lookupAnswer(t *testing.T, addr, topic string) *pb.CommandLookupTopicResponse {
	t.Helper()
	lc := dialLookup(t, addr)
	return lc.roundTrip(&pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{
		Topic: proto.String(topic), RequestId: proto.Uint64(1)}}).GetLookupTopicResponse()
}

// TestBrokerTLSProduceConsume: the proxy reaches both brokers only through their TLS ports
// (a plaintext CONNECT there would be dropped by the broker), verifying their certificate
// for 127.0.0.1 against the rig's CA and presenting the client certificate they require.
// A plaintext client and a TLS client produce and
// consume through it on a topic with partitions on both brokers, and lookup answers name
// the brokers' TLS endpoints.
func TestBrokerTLSProduceConsume(t *testing.T) {
	dir := t.TempDir()
	ca := certs.NewCA(t, dir, "proxy")
	server := ca.Server(t, "proxy", time.Now().Add(time.Hour))
	proxy := startProxy(t, brokerTLSURLs(t), brokerTLSYAML("")+
		fmt.Sprintf("tls:\n  certFile: %q\n  keyFile: %q\n", server.CertFile, server.KeyFile))

	topic, owners := partitionedTopicOnBothBrokers(t, "brokertls", 4)
	lr := lookupAnswer(t, proxy.Addr, topic+"-partition-0")
	tlsURL := theRig.Brokers[owners[0]-1].TLSURL
	if lr.GetResponse() != pb.CommandLookupTopicResponse_Connect || lr.GetBrokerServiceUrlTls() != tlsURL ||
		lr.GetBrokerServiceUrl() != "pulsar://"+strings.TrimPrefix(tlsURL, "pulsar+ssl://") || !lr.GetProxyThroughServiceUrl() {
		t.Fatalf("lookup answer %v, want both URLs naming %s", lr, tlsURL)
	}

	plain := newClient(t, proxy.PulsarURL)
	overTLS := newTLSClient(t, proxy.PulsarTLSURL, ca.CertFile, nil)
	consumer := subscribe(t, overTLS, topic, "s", pulsar.Shared)
	consumeAll(t, consumer, produce(t, plain, topic, 1000))
	for _, n := range owners {
		addr := strings.TrimPrefix(theRig.Brokers[n-1].TLSURL, "pulsar+ssl://")
		if got := proxy.metric(t, "pulsar_proxy_broker_sessions_total", fmt.Sprintf("broker=%q", addr)); got < 1 {
			t.Errorf("no session to broker %d's TLS port %s", n, addr)
		}
	}
}

// TestBrokerTLSWrongHostRefused: the proxy knows broker 1 as localhost, which its
// certificate (for 127.0.0.1) does not name. Lookups and direct connections are refused
// with ServiceNotReady and a log line naming the certificate problem; with hostname
// verification turned off (and a startup warning) the same broker serves.
func TestBrokerTLSWrongHostRefused(t *testing.T) {
	port := strings.TrimPrefix(brokerTLSURLs(t)[0], "pulsar+ssl://127.0.0.1:")
	asLocalhost := []string{"pulsar+ssl://localhost:" + port}
	proxy := startProxy(t, asLocalhost, brokerTLSYAML(""))
	topic := uniqueTopic(t, "wronghost")

	lr := lookupAnswer(t, proxy.Addr, topic)
	if lr.GetResponse() != pb.CommandLookupTopicResponse_Failed || lr.GetError() != pb.ServerError_ServiceNotReady ||
		!strings.Contains(lr.GetMessage(), "certificate for another host") {
		t.Fatalf("lookup answer %v, want ServiceNotReady naming the certificate", lr)
	}
	resp, _ := rawConnect(t, proxy.Addr, func(c *pb.CommandConnect) { c.ProxyToBrokerUrl = proto.String("localhost:" + port) })
	if resp.GetType() != pb.BaseCommand_ERROR || resp.GetError().GetError() != pb.ServerError_ServiceNotReady ||
		!strings.Contains(resp.GetError().GetMessage(), "certificate for another host") {
		t.Fatalf("direct CONNECT answered %v, want ServiceNotReady naming the certificate", resp)
	}
	waitLogLine(t, proxy, "broker certificate refused", "certificate for another host", "localhost:"+port)

	lax := startProxy(t, asLocalhost, brokerTLSYAML("    skipHostnameVerification: true\n"))
	waitLogLine(t, lax, `"setting":"broker.tls.skipHostnameVerification"`, "any certificate from a trusted CA is accepted for any broker")
	client := newClient(t, lax.PulsarURL)
	placeTopic(t, topic, 1)
	consumer := subscribe(t, client, topic, "s", pulsar.Exclusive)
	consumeAll(t, consumer, produce(t, client, topic, 100))
}

// placeTopic puts topic's bundle on broker n.
func placeTopic(t *testing.T, topic string, n int) {
	t.Helper()
	if err := theRig.PlaceTopic(testCtx(t), topic, n); err != nil {
		t.Fatalf("place %s on broker %d: %v", topic, n, err)
	}
}

// TestBrokerProxyProtocolCarriesClientAddress: a load balancer in front of the proxy sends
// a PROXY v2 header for 203.0.113.7; the proxy sends the client's address on to the broker
// (v2 inside TLS, v1 in plaintext), whose topic stats show it as the producer's and the
// consumer's address, where they would otherwise show the proxy's socket.
func TestBrokerProxyProtocolCarriesClientAddress(t *testing.T) {
	for _, tc := range []struct {
		name    string
		brokers []string
		yaml    string
	}{
		{"v2 over TLS", brokerTLSURLs(t), brokerTLSYAML("  proxyProtocol: v2\n")},
		{"v1 plaintext", brokerURLs(), "broker:\n  proxyProtocol: v1\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proxy := startProxy(t, tc.brokers, tc.yaml+"proxyProtocol:\n  enabled: true\n  trustedCIDRs: [127.0.0.0/8]\n")
			lb := &tcpForwarder{target: proxy.Addr, header: v2HeaderFrom(t, "203.0.113.7:41000")}
			lb.start(t, "127.0.0.1:0")
			client := newClient(t, "pulsar://"+lb.ln.Addr().String())

			topic := uniqueTopic(t, "ppbroker")
			consumer := subscribe(t, client, topic, "s", pulsar.Exclusive)
			p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			st, err := theRig.TopicStats(testCtx(t), topic)
			if err != nil {
				t.Fatal(err)
			}
			if len(st.Publishers) != 1 || st.Publishers[0].Address != "203.0.113.7:41000" {
				t.Fatalf("broker shows publishers %+v, want address 203.0.113.7:41000", st.Publishers)
			}
			if c := st.Subscriptions["s"].Consumers; len(c) != 1 || c[0].Address != "203.0.113.7:41000" {
				t.Fatalf("broker shows consumers %+v, want address 203.0.113.7:41000", c)
			}
			p.Close()
			consumeAll(t, consumer, produce(t, client, topic, 100))
		})
	}
}
