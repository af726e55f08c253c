package e2e

import (
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/pires/go-proxyproto"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// TestTLSProxyProtocolAddressInSessionLog: the real binary with proxyProtocol enabled. A v2
// header from loopback (trusted) sets the address in the session log; a client sending no
// header (allowed: requireHeader is false) still produces and consumes.
func TestTLSProxyProtocolAddressInSessionLog(t *testing.T) {
	proxy := startProxy(t, brokerURLs(), "proxyProtocol:\n  enabled: true\n  trustedCIDRs: [127.0.0.0/8]\n")

	conn, err := net.DialTimeout("tcp", proxy.Addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(15 * time.Second))
	h := proxyproto.HeaderProxyFromAddrs(2, net.TCPAddrFromAddrPort(netip.MustParseAddrPort("203.0.113.7:41000")),
		net.TCPAddrFromAddrPort(netip.MustParseAddrPort("192.0.2.1:6650")))
	if _, err := h.WriteTo(conn); err != nil {
		t.Fatal(err)
	}
	c := &pb.CommandConnect{ClientVersion: proto.String("e2e-raw"), ProtocolVersion: proto.Int32(21)}
	if err := frame.WriteCommand(conn, &pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: c}); err != nil {
		t.Fatal(err)
	}
	f, err := frame.NewReader(conn, 0).ReadFrame()
	if err != nil {
		t.Fatalf("no answer to CONNECT: %v", err)
	}
	if resp, err := frame.Decode(f.Command); err != nil || resp.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("got %v, %v; want CONNECTED", resp, err)
	}
	conn.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(proxy.LogPath)
		if strings.Contains(string(b), `"remote":"203.0.113.7:41000"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the header's address is not in the session log")
		}
		time.Sleep(50 * time.Millisecond)
	}

	client := newClient(t, proxy.PulsarURL)
	topic := uniqueTopic(t, "pp")
	consumer := subscribe(t, client, topic, "s", pulsar.Exclusive)
	consumeAll(t, consumer, produce(t, client, topic, 1000))
}
