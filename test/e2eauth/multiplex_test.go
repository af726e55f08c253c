package e2eauth

import (
	"testing"

	"github.com/pulsar-proxy/pulsar-proxy/test/proxyproc"
)

// TestMultiplexedConnectionsArePerPrincipal: with broker.multiplex on, clients authenticated
// at the proxy by their certificates share broker connections per principal (the shared
// connection's CONNECT names the role as original_principal), so the broker authorizes each
// client as itself: alice produces and consumes where only she may, bob is refused there by
// the broker, never by the proxy (whose policy allows everyone). Brokers that authenticate
// forwarded credentials cannot be behind a multiplexing proxy (it forwards none), so this
// runs on the trusting rig.
func TestMultiplexedConnectionsArePerPrincipal(t *testing.T) {
	saved := proxyproc.Env
	proxyproc.Env = []string{"PULSAR_PROXY_BROKER_MULTIPLEX=true", "PULSAR_PROXY_SESSION_PASSTHROUGH=false",
		"PULSAR_PROXY_AUTH_FORWARD_CLIENT_CREDENTIALS=false"}
	t.Cleanup(func() { proxyproc.Env = saved })
	m := startMTLSProxy(t, trustingRig(t), "cn", "")
	assertBrokerAuthorizesCertRoles(t, m, m.ca.Client(t, "alice"), m.ca.Client(t, "bob"))
	if n := m.metric(t, "pulsar_proxy_multiplex_dials_total", `result="ok"`); n < 2 {
		t.Fatalf("%v multiplexed broker connections opened, want at least one for alice and one for bob", n)
	}
	if n := m.metric(t, "pulsar_proxy_multiplex_clients"); n < 1 {
		t.Fatalf("pulsar_proxy_multiplex_clients = %v while alice's client is open", n)
	}
}
