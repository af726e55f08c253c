package session

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// The server refuses a connection over the rate with ServiceNotReady and counts it.
func TestServerRefusesConnectionsOverTheRate(t *testing.T) {
	cfg := testConfig()
	cfg.ConnectionRatePerIP, cfg.ConnectionBurstPerIP = 0.001, 2
	addr, m := startProxy(t, cfg, fakeResolver(nil), noTargets{})
	for range 2 {
		p := dialPeer(t, addr)
		p.send(connectCmd(nil))
		if got := p.recv(); got.GetType() != pb.BaseCommand_CONNECTED {
			t.Fatalf("got %v, want CONNECTED", got)
		}
	}
	p := dialPeer(t, addr)
	p.send(connectCmd(nil))
	if got := p.recv(); got.GetError().GetError() != pb.ServerError_ServiceNotReady {
		t.Fatalf("third connection got %v, want ServiceNotReady", got)
	}
	p.expectClosed()
	waitCounter(t, m.handshakeFailures.WithLabelValues(string(ReasonConnectRate)), 1)
	if got := testutil.ToFloat64(m.closes.WithLabelValues(string(ReasonConnectRate))); got != 1 {
		t.Fatalf("closes = %v", got)
	}
}
