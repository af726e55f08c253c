package e2eauth

import (
	"context"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/pulsar-proxy/pulsar-proxy/internal/testcerts"
	"github.com/pulsar-proxy/pulsar-proxy/test/proxyproc"
)

// TestMultiplexedConnectionsArePerPrincipal: with broker.multiplex on, clients authenticated
// at the proxy by their certificates share broker connections per principal (the shared
// connection's CONNECT names the role as original_principal): two of alice's clients and one
// of bob's produce on a topic both may use, and the broker's topic stats show alice's two
// producers on one connection and bob's on another, the proxy having opened exactly those
// two. The broker authorizes each as itself: bob is refused where only alice may produce,
// by the broker, never by the proxy (whose policy allows everyone). Brokers that authenticate
// forwarded credentials cannot be behind a multiplexing proxy (it forwards none), so this
// runs on the trusting rig.
func TestMultiplexedConnectionsArePerPrincipal(t *testing.T) {
	saved := proxyproc.Env
	proxyproc.Env = []string{"PULSAR_PROXY_BROKER_MULTIPLEX=true", "PULSAR_PROXY_SESSION_PASSTHROUGH=false",
		"PULSAR_PROXY_AUTH_FORWARD_CLIENT_CREDENTIALS=false"}
	t.Cleanup(func() { proxyproc.Env = saved })
	r := trustingRig(t)
	m := startMTLSProxy(t, r, "cn", "")
	alice, bob := m.ca.Client(t, "alice"), m.ca.Client(t, "bob")

	topic := uniqueTopic(nsShared, "mux")
	for name, pair := range map[string]testcerts.Pair{"alice-1": alice, "alice-2": alice, "bob-1": bob} {
		p, err := m.certClient(t, pair, 20*time.Second).CreateProducer(pulsar.ProducerOptions{Topic: topic, Name: name})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte(name)}); err != nil {
			t.Fatalf("%s: send: %v", name, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := r.TopicStats(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	addr := map[string]string{}
	for _, p := range st.Publishers {
		addr[p.ProducerName] = p.Address
	}
	t.Logf("broker's view of the producers' connections: %v", addr)
	if len(addr) != 3 || addr["alice-1"] != addr["alice-2"] || addr["alice-1"] == addr["bob-1"] {
		t.Fatalf("want alice's two producers on one broker connection and bob's on another: %v", addr)
	}
	if n := m.metric(t, "pulsar_proxy_multiplex_dials_total", `result="ok"`); n != 2 {
		t.Fatalf("%v multiplexed broker connections opened, want one for alice and one for bob", n)
	}
	assertBrokerAuthorizesCertRoles(t, m, alice, bob)
}
