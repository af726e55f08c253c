package session

import (
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

func TestConnectRatePerIP(t *testing.T) {
	now := time.Unix(1000, 0)
	c := newConnectRate(2, 3, 64) // 2 per second, 3 at once
	c.now = func() time.Time { return now }
	a, a2, b := tcpAddr("203.0.113.7:1000"), tcpAddr("[::ffff:203.0.113.7]:2000"), tcpAddr("203.0.113.8:1000")
	for i := range 3 {
		if !c.allow(a) {
			t.Fatalf("connection %d of the burst refused", i+1)
		}
	}
	if c.allow(a2) {
		t.Fatal("a fourth connection at once allowed (the mapped spelling of the same IP)")
	}
	if !c.allow(b) {
		t.Fatal("another IP refused")
	}
	now = now.Add(500 * time.Millisecond) // one token back
	if !c.allow(a) || c.allow(a) {
		t.Fatal("after half a second exactly one more connection should pass")
	}
	now = now.Add(time.Hour) // every bucket refilled: swept
	c.allow(b)
	if n := len(c.limiters); n != 1 {
		t.Fatalf("%d buckets kept after a sweep, want only the one just used", n)
	}
	if newConnectRate(0, 20, 64) != nil || !(*connectRate)(nil).allow(a) {
		t.Fatal("a zero rate must mean no limit")
	}
}

// When the table is full, new IPs pass untracked: a flood of addresses cannot lock everyone out.
func TestConnectRateTableBound(t *testing.T) {
	c := newConnectRate(1, 1, 64)
	now := time.Unix(1000, 0)
	c.now = func() time.Time { return now }
	for i := range maxTrackedIPs {
		c.limiters[netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})] = nil
	}
	c.nextSweep = now.Add(time.Hour)
	fresh := tcpAddr("198.51.100.1:1")
	if !c.allow(fresh) || !c.allow(fresh) {
		t.Fatal("an untracked IP was refused while the table is full")
	}
}

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
