package session

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/listener"
)

func tcpAddr(s string) net.Addr { return net.TCPAddrFromAddrPort(netip.MustParseAddrPort(s)) }

func TestClientIPsLimitPerAddress(t *testing.T) {
	gauge := prometheus.NewGauge(prometheus.GaugeOpts{Name: "ips"})
	ips := newClientIPs(2, gauge)
	mustAcquire := func(addr string) func() {
		t.Helper()
		release, ok := ips.acquire(tcpAddr(addr))
		if !ok {
			t.Fatalf("%s refused", addr)
		}
		return release
	}
	mustRefuse := func(addr string) {
		t.Helper()
		if _, ok := ips.acquire(tcpAddr(addr)); ok {
			t.Fatalf("%s accepted over the limit", addr)
		}
	}

	a1, a2 := mustAcquire("203.0.113.7:1"), mustAcquire("203.0.113.7:2")
	mustRefuse("203.0.113.7:3")
	mustRefuse("[::ffff:203.0.113.7]:4") // the same client, IPv4-mapped
	b := mustAcquire("203.0.113.8:1")    // another IP has its own count
	if got := testutil.ToFloat64(gauge); got != 2 {
		t.Fatalf("distinct IPs gauge %v, want 2", got)
	}

	a1()
	a3 := mustAcquire("203.0.113.7:5") // a released slot is free again
	mustRefuse("203.0.113.7:6")

	a2()
	a3()
	b()
	if len(ips.count) != 0 || testutil.ToFloat64(gauge) != 0 {
		t.Fatalf("after every release: %d IPs held, gauge %v", len(ips.count), testutil.ToFloat64(gauge))
	}
}

func TestClientIPsUnlimitedAndAddressesWithoutIP(t *testing.T) {
	gauge := prometheus.NewGauge(prometheus.GaugeOpts{Name: "ips"})
	ips := newClientIPs(0, gauge)
	var releases []func()
	for range 100 {
		release, ok := ips.acquire(tcpAddr("203.0.113.7:1"))
		if !ok {
			t.Fatal("refused without a limit")
		}
		releases = append(releases, release)
	}
	if _, ok := ips.acquire(&net.UnixAddr{Name: "@x", Net: "unix"}); !ok {
		t.Fatal("an address without an IP was refused")
	}
	for _, r := range releases {
		r()
	}
	if len(ips.count) != 0 || testutil.ToFloat64(gauge) != 0 {
		t.Fatalf("after every release: %d IPs held, gauge %v", len(ips.count), testutil.ToFloat64(gauge))
	}
}

// connectVia opens a connection to addr, sends a PROXY v2 header from src (none if src is
// "") and a CONNECT, and returns the peer and the proxy's answer.
func connectVia(t *testing.T, addr, src string) (*peer, *pb.BaseCommand) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	p := peerOn(t, c)
	if src != "" {
		c.Write(v2HeaderFrom(t, src))
	}
	p.send(connectCmd(nil))
	return p, p.recv()
}

func TestPerIPLimitCountsTheProxyHeaderAddress(t *testing.T) {
	cfg := testConfig()
	cfg.SummaryLevel = zerolog.InfoLevel
	cfg.MaxConnectionsPerIP = 1
	o := listener.Options{Proxy: listener.ProxyOptions{Enabled: true,
		TrustedCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, HeaderTimeout: 5 * time.Second}}
	addr, m, logs := startWrappedProxyConfig(t, cfg, nil, o, nil)
	connected := func(p *peer, got *pb.BaseCommand) *peer {
		t.Helper()
		if got.GetType() != pb.BaseCommand_CONNECTED {
			t.Fatalf("got %v, want CONNECTED", got)
		}
		return p
	}
	refused := func(p *peer, got *pb.BaseCommand) {
		t.Helper()
		if got.GetType() != pb.BaseCommand_ERROR || got.GetError().GetError() != pb.ServerError_ServiceNotReady {
			t.Fatalf("got %v, want ERROR ServiceNotReady", got)
		}
		p.expectClosed()
	}

	// Every connection comes from 127.0.0.1; only the header tells them apart.
	first := connected(connectVia(t, addr, "203.0.113.7:41000"))
	refused(connectVia(t, addr, "203.0.113.7:41001"))
	waitCounter(t, m.handshakeFailures.WithLabelValues(string(ReasonTooManyFromIP)), 1)
	logs.waitFor(t, `"remote":"203.0.113.7:41001"`, `"reason":"too_many_connections_per_ip"`)
	connected(connectVia(t, addr, "203.0.113.8:41000"))

	// Without a header the socket's peer is what counts.
	connected(connectVia(t, addr, ""))
	refused(connectVia(t, addr, ""))
	if got := testutil.ToFloat64(m.clientIPs); got != 3 {
		t.Fatalf("distinct client IPs %v, want 3", got)
	}

	first.c.Close()
	waitCounter(t, m.closes.WithLabelValues(string(ReasonClientClosed)), 1)
	connected(connectVia(t, addr, "203.0.113.7:41002"))
}
