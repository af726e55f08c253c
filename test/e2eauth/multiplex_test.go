package e2eauth

import (
	"context"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/certs"
	"github.com/pulsar-proxy/pulsar-proxy/test/proxyproc"
	"github.com/pulsar-proxy/pulsar-proxy/test/rig"
)

// muxEnv runs a proxy with broker.multiplex on. Brokers that authenticate forwarded
// credentials cannot be behind a multiplexing proxy (it forwards none; the configuration
// refuses forwardClientCredentials with multiplex), so such proxies front the trusting rig.
var muxEnv = []string{"PULSAR_PROXY_BROKER_MULTIPLEX=true", "PULSAR_PROXY_AUTH_FORWARD_CLIENT_CREDENTIALS=false"}

var (
	// muxRig, while TestAuthMultiplexed runs, is the rig startProxy's proxies front, with
	// multiplexing on; nil: the auth rig, one broker connection per client.
	muxRig *rig.Rig
	// muxDials adds up the shared broker connections the proxies of one such test opened.
	muxDials float64
)

// brokers is the rig the tests' proxies front in the current mode.
func brokers() *rig.Rig {
	if muxRig != nil {
		return muxRig
	}
	return theRig
}

// multiplexed reports whether startProxy's proxies run with broker.multiplex on.
func multiplexed() bool { return muxRig != nil }

// TestAuthMultiplexed runs the authentication and authorization tests of direct sessions
// again with broker.multiplex on (in front of the trusting rig, see muxEnv): token
// authentication with produce and consume, the brokers authorizing each client's own role,
// the proxy's denials answered with the client's own request id (pulsar-client-go matches
// answers by it; the raw tests compare it), crafted frames, topic lists filtered per client
// on a direct session and through a Java pattern consumer's watcher, credentials renewed per
// client and an expired client disconnected, a policy reload. Each must have opened a shared
// broker connection. Left out: CONNECT refusals (answered before a session picks its mode),
// the role limits, the admin API, transactions (no coordinators on the trusting rig), the
// Python client and the readiness test of the auth rig's refusing brokers.
func TestAuthMultiplexed(t *testing.T) {
	r := trustingRig(t)
	saved := proxyproc.Env
	proxyproc.Env, muxRig = muxEnv, r
	t.Cleanup(func() { proxyproc.Env, muxRig = saved, nil })
	for _, tc := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"AuthorizedClientProducesAndConsumes", TestAuthorizedClientProducesAndConsumes},
		{"BrokerAuthorizesOriginalPrincipal", TestBrokerAuthorizesOriginalPrincipal},
		{"ProxyRefusesProducerBeforeTheBroker", TestProxyRefusesProducerBeforeTheBroker},
		{"CraftedFramesCannotReachForbiddenTopics", TestCraftedFramesCannotReachForbiddenTopics},
		{"TopicListIsFiltered", TestTopicListIsFiltered},
		{"TopicsHashOracleLearnsNothing", TestTopicsHashOracleLearnsNothing},
		{"PatternConsumerWatcherThroughProxy", TestPatternConsumerWatcherThroughProxy},
		{"TokenRefreshKeepsSessionsAlive", TestTokenRefreshKeepsSessionsAlive},
		{"ExpiredClientIsDisconnected", TestExpiredClientIsDisconnected},
		{"PolicyReload", TestPolicyReload},
	} {
		muxDials = 0
		if t.Run(tc.name, tc.run) && muxDials < 1 {
			t.Errorf("%s: its proxies opened no shared broker connection; it did not run multiplexed", tc.name)
		}
	}
}

// TestMultiplexedConnectionsArePerPrincipal: with broker.multiplex on, clients authenticated
// at the proxy by their certificates share broker connections per principal (the shared
// connection's CONNECT names the role as original_principal): two of alice's clients and one
// of bob's produce on a topic both may use, and the broker's topic stats show alice's two
// producers on one connection and bob's on another, the proxy having opened exactly those
// two. The broker authorizes each as itself: bob is refused where only alice may produce,
// by the broker, never by the proxy (whose policy allows everyone). On the trusting rig (see
// muxEnv).
func TestMultiplexedConnectionsArePerPrincipal(t *testing.T) {
	saved := proxyproc.Env
	proxyproc.Env = muxEnv
	t.Cleanup(func() { proxyproc.Env = saved })
	r := trustingRig(t)
	m := startMTLSProxy(t, r, "cn", "")
	alice, bob := m.ca.Client(t, "alice"), m.ca.Client(t, "bob")

	topic := uniqueTopic(nsShared, "mux")
	for name, pair := range map[string]certs.Pair{"alice-1": alice, "alice-2": alice, "bob-1": bob} {
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
