package discovery

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/wait"
	"github.com/rs/zerolog"
)

// dnsServer is a real DNS server on 127.0.0.1 whose records the test changes.
type dnsServer struct {
	addr string
	mu   sync.Mutex
	rrs  map[uint16][]string // by qtype: records in zone-file syntax
	nx   bool
	asks map[uint16]int
}

func startDNSServer(t *testing.T) *dnsServer {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &dnsServer{addr: pc.LocalAddr().String(), rrs: map[uint16][]string{}, asks: map[uint16]int{}}
	started := make(chan struct{})
	srv := &dns.Server{PacketConn: pc, Handler: s, NotifyStartedFunc: func() { close(started) }}
	go srv.ActivateAndServe()
	<-started
	t.Cleanup(func() { srv.Shutdown() })
	return s
}

func (s *dnsServer) set(qtype uint16, records ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rrs[qtype] = records
	s.nx = false
}

func (s *dnsServer) setNX() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nx = true
}

func (s *dnsServer) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(req)
	q := req.Question[0]
	s.mu.Lock()
	s.asks[q.Qtype]++
	if s.nx {
		m.Rcode = dns.RcodeNameError
	} else {
		for _, rec := range s.rrs[q.Qtype] {
			rr, err := dns.NewRR(rec)
			if err != nil {
				panic(err)
			}
			m.Answer = append(m.Answer, rr)
		}
	}
	s.mu.Unlock()
	w.WriteMsg(m)
}

func runProvider(t *testing.T, p Provider) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func TestDNSARecordsFollowTTL(t *testing.T) {
	srv := startDNSServer(t)
	srv.set(dns.TypeA, "broker.pulsar.svc.cluster.local. 1 IN A 127.0.0.1", "broker.pulsar.svc.cluster.local. 1 IN A 127.0.0.2")
	srv.set(dns.TypeAAAA, "broker.pulsar.svc.cluster.local. 1 IN AAAA ::1")
	m := NewMetrics(nil)
	// The interval is an hour: only the 1 s TTL can make it see the change.
	d, err := NewDNS(DNSConfig{Name: "Broker.pulsar.svc.cluster.local", Port: 6650, Server: srv.addr,
		Interval: time.Hour, minInterval: 10 * time.Millisecond}, zerolog.Nop(), m)
	if err != nil {
		t.Fatal(err)
	}
	runProvider(t, d)
	waitBrokers(t, d, "pulsar://127.0.0.1:6650", "pulsar://127.0.0.2:6650", "pulsar://[::1]:6650")
	srv.set(dns.TypeA, "broker.pulsar.svc.cluster.local. 1 IN A 127.0.0.3")
	srv.set(dns.TypeAAAA)
	waitBrokers(t, d, "pulsar://127.0.0.3:6650")

	// The name disappears: the last list stays, marked stale.
	srv.setNX()
	wait.Until(t, 10*time.Second, "the NXDOMAIN answer counted as a discovery error", func() bool {
		return testutil.ToFloat64(m.discoveryErrors.WithLabelValues("dns")) >= 1
	})
	waitBrokers(t, d, "pulsar://127.0.0.3:6650")
	if !d.isStale() || !strings.Contains(d.Problem(), "NXDOMAIN") {
		t.Fatalf("problem %q", d.Problem())
	}
	srv.set(dns.TypeA, "broker.pulsar.svc.cluster.local. 1 IN A 127.0.0.4")
	waitBrokers(t, d, "pulsar://127.0.0.4:6650")
	if d.isStale() {
		t.Fatal("still stale after the name came back")
	}
}

func TestDNSSRVRecords(t *testing.T) {
	srv := startDNSServer(t)
	name := "_pulsar._tcp.broker.pulsar.svc.cluster.local."
	srv.set(dns.TypeSRV,
		name+" 1 IN SRV 0 50 6650 broker-0.broker.pulsar.svc.cluster.local.",
		name+" 1 IN SRV 0 50 6651 broker-1.broker.pulsar.svc.cluster.local.",
		name+" 1 IN SRV 0 50 0 broker-2.broker.pulsar.svc.cluster.local.") // port 0: skipped
	d, err := NewDNS(DNSConfig{Name: name, SRV: true, Server: srv.addr, Interval: time.Hour, minInterval: 10 * time.Millisecond}, zerolog.Nop(), NewMetrics(nil))
	if err != nil {
		t.Fatal(err)
	}
	runProvider(t, d)
	waitBrokers(t, d, "pulsar://broker-0.broker.pulsar.svc.cluster.local:6650", "pulsar://broker-1.broker.pulsar.svc.cluster.local:6651")
	srv.set(dns.TypeSRV, name+" 1 IN SRV 0 50 6650 broker-3.broker.pulsar.svc.cluster.local.")
	waitBrokers(t, d, "pulsar://broker-3.broker.pulsar.svc.cluster.local:6650")
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.asks[dns.TypeA] != 0 {
		t.Fatal("SRV mode asked for A records")
	}
}

func TestDNSEmptyAnswerKeepsList(t *testing.T) {
	srv := startDNSServer(t)
	srv.set(dns.TypeA, "b.example. 1 IN A 127.0.0.1")
	m := NewMetrics(nil)
	d, err := NewDNS(DNSConfig{Name: "b.example", Port: 6650, Server: srv.addr, Interval: 20 * time.Millisecond,
		minInterval: 10 * time.Millisecond, Timeout: 100 * time.Millisecond}, zerolog.Nop(), m)
	if err != nil {
		t.Fatal(err)
	}
	runProvider(t, d)
	waitBrokers(t, d, "pulsar://127.0.0.1:6650")
	srv.mu.Lock()
	srv.rrs = nil // answers nothing: the empty answer is not believed
	srv.mu.Unlock()
	wait.Until(t, 10*time.Second, "two empty answers counted as discovery errors", func() bool {
		return testutil.ToFloat64(m.discoveryErrors.WithLabelValues("dns")) >= 2
	})
	waitBrokers(t, d, "pulsar://127.0.0.1:6650")
}

func TestDNSRefusesBadNames(t *testing.T) {
	for _, name := range []string{"", "not a name", "127.0.0.1", "a..b", strings.Repeat("x", 64) + ".example"} {
		if _, err := NewDNS(DNSConfig{Name: name, Port: 6650, Server: "127.0.0.1:53"}, zerolog.Nop(), NewMetrics(nil)); err == nil {
			t.Errorf("NewDNS(%q) accepted", name)
		}
	}
	if _, err := NewDNS(DNSConfig{Name: "b.example", Port: 0, Server: "127.0.0.1:53"}, zerolog.Nop(), NewMetrics(nil)); err == nil {
		t.Error("A mode without a port accepted")
	}
}
