package session

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/listener"
)

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

// Both per-IP limits count an IPv6 client by its /64 (the default): a client holding a
// prefix cannot dodge them with a fresh address per connection. IPv4 stays per address.
func TestPerIPLimitsCountIPv6ClientsPerPrefix(t *testing.T) {
	o := listener.Options{Proxy: listener.ProxyOptions{Enabled: true,
		TrustedCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, HeaderTimeout: 5 * time.Second}}
	for _, tc := range []struct {
		name   string
		limit  func(*Config)
		reason CloseReason
	}{
		{"maxConnectionsPerIP", func(c *Config) { c.MaxConnectionsPerIP = 1 }, ReasonTooManyFromIP},
		{"connectionRatePerIP", func(c *Config) { c.ConnectionRatePerIP, c.ConnectionBurstPerIP = 0.001, 1 }, ReasonConnectRate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			tc.limit(&cfg)
			addr, m, _ := startWrappedProxyConfig(t, cfg, nil, o, nil)
			for _, step := range []struct {
				src     string
				connect bool
			}{
				{"[2001:db8:1:2::1]:41000", true},
				{"[2001:db8:1:2:ffff:ffff:ffff:fffe]:41001", false}, // same /64
				{"[2001:db8:1:3::1]:41000", true},                   // next /64
				{"203.0.113.7:41000", true},
				{"203.0.113.8:41000", true}, // IPv4: per address
			} {
				_, got := connectVia(t, addr, step.src)
				if connected := got.GetType() == pb.BaseCommand_CONNECTED; connected != step.connect {
					t.Fatalf("from %s: got %v, want connected=%v", step.src, got, step.connect)
				}
				if !step.connect && got.GetError().GetError() != pb.ServerError_ServiceNotReady {
					t.Fatalf("from %s: got %v, want ServiceNotReady", step.src, got)
				}
			}
			waitCounter(t, m.handshakeFailures.WithLabelValues(string(tc.reason)), 1)
		})
	}
}
