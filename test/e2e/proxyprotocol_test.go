package e2e

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/pires/go-proxyproto"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/test/wait"
)

// TestTLSProxyProtocolAddressInSessionLog: the real binary with proxyProtocol enabled. A v2
// header from loopback (trusted) sets the address in the session log; a client sending no
// header (allowed: requireHeader is false) still produces and consumes.
func TestTLSProxyProtocolAddressInSessionLog(t *testing.T) {
	proxy := startProxy(t, brokerURLs(), "proxyProtocol:\n  enabled: true\n  trustedCIDRs: [127.0.0.0/8]\n")

	conn := connectedAs(t, proxy.Addr, "203.0.113.7:41000")
	conn.Close()
	waitLogLine(t, proxy, `"remote":"203.0.113.7:41000"`)

	client := newClient(t, proxy.PulsarURL)
	topic := uniqueTopic(t, "pp")
	consumer := subscribe(t, client, topic, "s", pulsar.Exclusive)
	consumeAll(t, consumer, produce(t, client, topic, 1000))
}

// v2HeaderFrom is a PROXY v2 header naming src as the client.
func v2HeaderFrom(t *testing.T, src string) []byte {
	t.Helper()
	h := proxyproto.HeaderProxyFromAddrs(2, net.TCPAddrFromAddrPort(netip.MustParseAddrPort(src)),
		net.TCPAddrFromAddrPort(netip.MustParseAddrPort("192.0.2.1:6650")))
	b, err := h.Format()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// connectAs dials the proxy, sends a PROXY v2 header naming src and a CONNECT, and returns
// the proxy's answer and the connection (closed when the test ends).
func connectAs(t *testing.T, addr, src string) (*pb.BaseCommand, net.Conn) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(15 * time.Second))
	if _, err := conn.Write(v2HeaderFrom(t, src)); err != nil {
		t.Fatal(err)
	}
	c := &pb.CommandConnect{ClientVersion: proto.String("e2e-raw"), ProtocolVersion: proto.Int32(21)}
	if err := frame.WriteCommand(conn, &pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: c}); err != nil {
		t.Fatal(err)
	}
	f, err := frame.NewReader(conn, 0).ReadFrame()
	if err != nil {
		t.Fatalf("no answer to CONNECT from %s: %v", src, err)
	}
	resp, err := frame.Decode(f.Command)
	if err != nil {
		t.Fatal(err)
	}
	return resp, conn
}

func connectedAs(t *testing.T, addr, src string) net.Conn {
	t.Helper()
	resp, conn := connectAs(t, addr, src)
	if resp.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("CONNECT from %s answered with %v, want CONNECTED", src, resp)
	}
	return conn
}

// waitLogLine waits for a line of the proxy's log that contains every part.
func waitLogLine(t *testing.T, p *proxy, parts ...string) {
	t.Helper()
	wait.Until(t, 10*time.Second, fmt.Sprintf("a log line with %q", parts), func() bool {
	lines:
		for _, line := range strings.Split(proxyLog(t, p), "\n") {
			for _, part := range parts {
				if !strings.Contains(line, part) {
					continue lines
				}
			}
			return true
		}
		return false
	})
}

// TestProxyHeaderAddressIsCountedPerIP: the real binary with proxyProtocol enabled and
// session.maxConnectionsPerIP 1. Every connection comes from loopback, so only the header's
// address tells clients apart: the limit applies to it, not to the socket's peer.
func TestProxyHeaderAddressIsCountedPerIP(t *testing.T) {
	proxy := startProxy(t, brokerURLs(), "proxyProtocol:\n  enabled: true\n  trustedCIDRs: [127.0.0.0/8]\n"+
		"session:\n  maxConnectionsPerIP: 1\n")

	first := connectedAs(t, proxy.Addr, "203.0.113.7:41000")

	resp, second := connectAs(t, proxy.Addr, "203.0.113.7:41001")
	if resp.GetType() != pb.BaseCommand_ERROR || resp.GetError().GetError() != pb.ServerError_ServiceNotReady {
		t.Fatalf("second connection from 203.0.113.7 answered with %v, want ERROR ServiceNotReady", resp)
	}
	expectClosed(t, second)
	refusals := func() float64 {
		return proxy.count(t, "pulsar_proxy_handshake_failures_total", `reason="too_many_connections_per_ip"`)
	}
	wait.Until(t, 10*time.Second, "the refusal counted", func() bool { return refusals() == 1 })
	waitLogLine(t, proxy, `"remote":"203.0.113.7:41001"`, `"reason":"too_many_connections_per_ip"`)

	connectedAs(t, proxy.Addr, "203.0.113.8:41000")
	if n := proxy.metric(t, "pulsar_proxy_client_ips_active"); n != 2 {
		t.Fatalf("pulsar_proxy_client_ips_active = %v, want 2", n)
	}

	// Closing the first connection frees its address's slot.
	first.Close()
	wait.Until(t, 10*time.Second, "the first session ended", func() bool {
		return proxy.count(t, "pulsar_proxy_session_closes_total", `reason="client_closed"`) == 1
	})
	connectedAs(t, proxy.Addr, "203.0.113.7:41002")
	if n := refusals(); n != 1 {
		t.Fatalf("%v refusals, want 1", n)
	}
}

// TestProxyHeaderAddressIsRateLimited: session.connectionRatePerIP counts new connections by
// the PROXY header's address: a burst of 2 from 203.0.113.7, the third refused, while
// 203.0.113.8 (same socket address, 127.0.0.1) still connects.
func TestProxyHeaderAddressIsRateLimited(t *testing.T) {
	proxy := startProxy(t, brokerURLs(), "proxyProtocol:\n  enabled: true\n  trustedCIDRs: [127.0.0.0/8]\n"+
		"session:\n  connectionRatePerIP: 0.01\n  connectionBurstPerIP: 2\n")
	connectedAs(t, proxy.Addr, "203.0.113.7:41000").Close()
	connectedAs(t, proxy.Addr, "203.0.113.7:41001").Close()
	resp, third := connectAs(t, proxy.Addr, "203.0.113.7:41002")
	if resp.GetType() != pb.BaseCommand_ERROR || resp.GetError().GetError() != pb.ServerError_ServiceNotReady {
		t.Fatalf("third connection from 203.0.113.7 answered with %v, want ERROR ServiceNotReady", resp)
	}
	expectClosed(t, third)
	waitLogLine(t, proxy, `"remote":"203.0.113.7:41002"`, `"reason":"connection_rate_per_ip"`)
	connectedAs(t, proxy.Addr, "203.0.113.8:41000")
	if n := proxy.metric(t, "pulsar_proxy_handshake_failures_total", `reason="connection_rate_per_ip"`); n != 1 {
		t.Fatalf("%v refusals counted, want 1", n)
	}
}

// TestProxyHeaderFromUntrustedAddressRefused: the same header from a source outside
// proxyProtocol.trustedCIDRs closes the connection, and its address is never used.
func TestProxyHeaderFromUntrustedAddressRefused(t *testing.T) {
	proxy := startProxy(t, brokerURLs(), "proxyProtocol:\n  enabled: true\n  trustedCIDRs: [10.0.0.0/8]\n")

	conn, err := net.DialTimeout("tcp", proxy.Addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Write(v2HeaderFrom(t, "203.0.113.7:41000"))
	frame.WriteCommand(conn, &pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(),
		Connect: &pb.CommandConnect{ClientVersion: proto.String("e2e-raw"), ProtocolVersion: proto.Int32(21)}})
	expectClosed(t, conn)
	wait.Until(t, 10*time.Second, "the refusal counted", func() bool {
		return proxy.count(t, "pulsar_proxy_handshake_failures_total", `reason="transport_setup_failed"`) == 1
	})
	waitLogLine(t, proxy, `"error":"PROXY protocol header from an untrusted address"`)
	if strings.Contains(proxyLog(t, proxy), "203.0.113.7") {
		t.Fatal("an untrusted header's address was used")
	}

	// A client without a header is still served (requireHeader is false).
	if resp, _ := rawConnect(t, proxy.Addr, func(*pb.CommandConnect) {}); resp.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("CONNECT without a header answered with %v", resp)
	}
}

// TestProxyHeaderThatNeverCompletesTimesOut: half a v2 header, then silence. The connection
// is closed after proxyProtocol.headerTimeout (far sooner than session.handshakeTimeout),
// and other clients are served meanwhile.
func TestProxyHeaderThatNeverCompletesTimesOut(t *testing.T) {
	proxy := startProxy(t, brokerURLs(), "proxyProtocol:\n  enabled: true\n  trustedCIDRs: [127.0.0.0/8]\n  headerTimeout: 500ms\n"+
		"session:\n  handshakeTimeout: 60s\n")

	stalled, err := net.DialTimeout("tcp", proxy.Addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	if _, err := stalled.Write(v2HeaderFrom(t, "203.0.113.7:41000")[:14]); err != nil {
		t.Fatal(err)
	}

	connectedAs(t, proxy.Addr, "203.0.113.8:41000")
	expectClosed(t, stalled) // within 10 s, so not the 60 s handshake timeout
	wait.Until(t, 10*time.Second, "the timeout counted", func() bool {
		return proxy.count(t, "pulsar_proxy_handshake_failures_total", `reason="transport_setup_failed"`) == 1
	})
	waitLogLine(t, proxy, `"error":"PROXY protocol header not complete in time"`)
	connectedAs(t, proxy.Addr, "203.0.113.7:41001")
}
