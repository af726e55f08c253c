package e2e

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/miekg/dns"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/test/wait"
)

// srvServer is a DNS server in the test process serving SRV records that the test changes.
type srvServer struct {
	addr string
	mu   sync.Mutex
	rrs  []dns.RR
}

func startSRVServer(t *testing.T) *srvServer {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &srvServer{addr: pc.LocalAddr().String()}
	started := make(chan struct{})
	srv := &dns.Server{PacketConn: pc, NotifyStartedFunc: func() { close(started) },
		Handler: dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
			m := new(dns.Msg)
			m.SetReply(req)
			if req.Question[0].Qtype == dns.TypeSRV {
				s.mu.Lock()
				m.Answer = append(m.Answer, s.rrs...)
				s.mu.Unlock()
			}
			w.WriteMsg(m)
		})}
	go srv.ActivateAndServe()
	<-started
	t.Cleanup(func() { srv.Shutdown() })
	return s
}

// set serves one SRV record per rig broker n, with target "localhost": a name that resolves
// to the brokers but is not what they advertise (127.0.0.1), like a Service name versus pod
// addresses.
func (s *srvServer) set(t *testing.T, name string, brokers ...int) {
	t.Helper()
	var rrs []dns.RR
	for _, n := range brokers {
		_, port, _ := net.SplitHostPort(brokerAddrs()[n-1])
		rr, err := dns.NewRR(fmt.Sprintf("%s 1 IN SRV 0 50 %s localhost.", name, port))
		if err != nil {
			t.Fatal(err)
		}
		rrs = append(rrs, rr)
	}
	s.mu.Lock()
	s.rrs = rrs
	s.mu.Unlock()
}

// TestDiscoveryDNSSRV runs the proxy with DNS (SRV) discovery only. Brokers advertise
// 127.0.0.1:port while DNS names them localhost:port, so clients' direct connections are
// allowed by the learned-target rule; a broker dropped from DNS is refused at once.
func TestDiscoveryDNSSRV(t *testing.T) {
	const name = "_pulsar._tcp.brokers.e2e.test."
	srv := startSRVServer(t)
	srv.set(t, name, 1, 2)
	proxy := startProxy(t, nil, fmt.Sprintf(`discovery:
  healthCheckInterval: 500ms
  dns:
    name: %q
    record: SRV
    server: %q
    refreshInterval: 1s
broker:
  allowedPorts: [%s]
`, name, srv.addr, rigPorts()))
	proxy.waitReady(t)
	if live := proxy.metric(t, "pulsar_proxy_brokers", `state="live"`); live != 2 {
		t.Fatalf("live brokers %v, want 2", live)
	}
	// 127.0.0.1:port is not what DNS lists: refused until a broker names it in a lookup.
	if targetAllowed(t, proxy, 2) {
		t.Fatal("a target neither discovery nor a lookup answer named was allowed")
	}

	c := newClient(t, proxy.PulsarURL)
	topic, owners := partitionedTopicOnBothBrokers(t, "dns", 4)
	t.Logf("partition owners: %v", owners)
	consumer := subscribe(t, c, topic, "s", pulsar.Shared)
	consumeAll(t, consumer, produce(t, c, topic, 400))
	if !targetAllowed(t, proxy, 2) {
		t.Fatal("broker 2's advertised address not allowed after lookups named it")
	}

	// DNS drops broker 2: lookups stop going to it; its DNS name is refused as a target.
	srv.set(t, name, 1)
	wait.Until(t, 10*time.Second, "broker 2 gone from the live set", func() bool {
		return proxy.metric(t, "pulsar_proxy_brokers", `state="live"`) == 1
	})
	_, port2, _ := net.SplitHostPort(brokerAddrs()[1])
	resp, conn := rawConnect(t, proxy.Addr, func(cc *pb.CommandConnect) { cc.ProxyToBrokerUrl = proto.String("localhost:" + port2) })
	conn.Close()
	if resp.GetType() != pb.BaseCommand_ERROR || !strings.Contains(resp.GetError().GetMessage(), "target broker not allowed") {
		t.Fatalf("CONNECT to a broker DNS dropped: %v", resp)
	}
	srv.set(t, name, 1, 2)
	wait.Until(t, 10*time.Second, "broker 2 back in the live set", func() bool {
		return proxy.metric(t, "pulsar_proxy_brokers", `state="live"`) == 2
	})
}
