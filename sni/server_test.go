package sni

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pires/go-proxyproto"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/pulsar-proxy/pulsar-proxy/brokers"
	"github.com/pulsar-proxy/pulsar-proxy/edge"
	"github.com/pulsar-proxy/pulsar-proxy/internal/connlimit"
	"github.com/pulsar-proxy/pulsar-proxy/internal/listener"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/certs"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/promtest"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/wait"
	"github.com/pulsar-proxy/pulsar-proxy/upstream"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// backend is a stand-in broker TLS port: a Go TLS server (certificate for b1.test) that
// echoes what it reads and records every connection it accepts, and optionally a PROXY
// header before the TLS.
type backend struct {
	ln       net.Listener
	tls      *tls.Config
	accepted atomic.Int64
	proxyHdr chan *proxyproto.Header // headers read, when readProxy
	names    chan string             // server names its TLS handshakes saw
	wg       sync.WaitGroup
}

func newBackend(t *testing.T, ca *certs.CA, readProxy bool, ech ...tls.EncryptedClientHelloKey) *backend {
	t.Helper()
	pair := ca.ServerFor(t, "b1", time.Now().Add(time.Hour), "b1.test")
	cert, err := tls.LoadX509KeyPair(pair.CertFile, pair.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{ln: ln, proxyHdr: make(chan *proxyproto.Header, 8), names: make(chan string, 8)}
	b.tls = &tls.Config{Certificates: []tls.Certificate{cert}, EncryptedClientHelloKeys: ech,
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) { b.names <- h.ServerName; return nil, nil }}
	b.wg.Go(func() { b.serve(readProxy) })
	t.Cleanup(func() { ln.Close(); b.wg.Wait() })
	return b
}

func (b *backend) serve(readProxy bool) {
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		b.accepted.Add(1)
		b.wg.Go(func() {
			defer c.Close()
			var r io.Reader = c
			if readProxy {
				br := bufio.NewReader(c)
				h, err := proxyproto.Read(br)
				if err != nil {
					return
				}
				b.proxyHdr <- h
				r = br
			}
			tc := tls.Server(readerConn{Conn: c, r: r}, b.tls)
			io.Copy(tc, tc)
		})
	}
}

type readerConn struct {
	net.Conn
	r io.Reader
}

func (c readerConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func (b *backend) port() string { _, p, _ := net.SplitHostPort(b.ln.Addr().String()); return p }

// targets is the target rule of a test: b1.test (and the service name pulsar.test) is the
// backend; every other name is refused as brokers.Set refuses it.
type targets struct{ port string }

func (t targets) AllowSNI(name string) (brokers.Broker, brokers.SNIMatch, error) {
	b := brokers.Broker{Host: "127.0.0.1", Port: t.port, TLS: true}
	switch strings.ToLower(name) {
	case "b1.test":
		return b, brokers.SNIBroker, nil
	case "pulsar.test":
		return b, brokers.SNIService, nil
	case "twin.test":
		return brokers.Broker{}, brokers.SNIBroker, brokers.ErrAmbiguousName
	}
	return brokers.Broker{}, brokers.SNIBroker, brokers.ErrTargetNotAllowed
}

type gate struct{ refuse bool }

func (g gate) Opaque() edge.Decision {
	if g.refuse {
		return edge.Decision{Outcome: edge.Close, Reason: edge.ReasonOpaque}
	}
	return edge.Decision{Outcome: edge.Forward}
}

type plane struct {
	t    *testing.T
	srv  *Server
	addr string
	reg  *promtest.Registry
	ca   *certs.CA
	done chan error
}

func startPlane(t *testing.T, b *backend, ca *certs.CA, tweak func(*Config)) *plane {
	t.Helper()
	reg := promtest.New()
	cfg := Config{Targets: targets{b.port()}, Gate: gate{}, Dialer: &upstream.Dialer{Timeout: 5 * time.Second},
		HandshakeTimeout: 5 * time.Second, MaxHelloBytes: 16 << 10, SummaryLevel: zerolog.Disabled,
		Log: zerolog.Nop(), Metrics: NewMetrics(reg)}
	if tweak != nil {
		tweak(&cfg)
	}
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &plane{t: t, srv: srv, addr: ln.Addr().String(), reg: reg, ca: ca, done: make(chan error, 1)}
	go func() { p.done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-p.done
	})
	return p
}

// dialTLS connects through the plane as a client of b1.test would.
func (p *plane) dialTLS(t *testing.T, cfg *tls.Config) (*tls.Conn, error) {
	t.Helper()
	raw, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	c := tls.Client(raw, p.clientConfig(cfg))
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := c.Handshake(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (p *plane) clientConfig(cfg *tls.Config) *tls.Config {
	cfg = cfg.Clone()
	roots := x509.NewCertPool()
	roots.AddCert(p.ca.Cert)
	cfg.RootCAs = roots
	return cfg
}

func echo(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != msg {
		t.Fatalf("echo: %q %v", got, err)
	}
}

func (p *plane) refused(reason Reason) float64 {
	return p.reg.Value(p.t, "pulsar_proxy_sni_refused_total", "reason", string(reason))
}

// Real TLS 1.2 and 1.3 clients reach the broker their server name names, end to end: the
// broker's certificate is verified by the client, the TLS is the broker's.
func TestRelaysTLS12And13(t *testing.T) {
	ca := certs.NewCA(t, t.TempDir(), "sni")
	b := newBackend(t, ca, false)
	p := startPlane(t, b, ca, nil)
	for _, tc := range []struct {
		what string
		cfg  *tls.Config
		want uint16
	}{
		{"TLS 1.3", &tls.Config{ServerName: "b1.test", MinVersion: tls.VersionTLS13}, tls.VersionTLS13},
		{"TLS 1.2", &tls.Config{ServerName: "b1.test", MaxVersion: tls.VersionTLS12}, tls.VersionTLS12},
		{"service name, any case", &tls.Config{ServerName: "Pulsar.Test", InsecureSkipVerify: true}, tls.VersionTLS13},
	} {
		c, err := p.dialTLS(t, tc.cfg)
		if err != nil {
			t.Fatalf("%s: %v", tc.what, err)
		}
		if v := c.ConnectionState().Version; v != tc.want {
			t.Errorf("%s: negotiated %x", tc.what, v)
		}
		echo(t, c, strings.Repeat(tc.what, 5000)) // larger than a splice pipe's first fill
		c.Close()
	}
	wait.Until(t, 10*time.Second, "three relays to end", func() bool {
		return p.reg.Value(p.t, "pulsar_proxy_sni_closes_total", "reason", string(ReasonClientClosed))+
			p.reg.Value(p.t, "pulsar_proxy_sni_closes_total", "reason", string(ReasonBrokerClosed)) == 3
	})
	if p.reg.Value(p.t, "pulsar_proxy_sni_relayed_total", "match", "broker") != 2 || p.reg.Value(p.t, "pulsar_proxy_sni_relayed_total", "match", "service") != 1 {
		t.Errorf("relayed by match: broker %v service %v", p.reg.Value(p.t, "pulsar_proxy_sni_relayed_total", "match", "broker"), p.reg.Value(p.t, "pulsar_proxy_sni_relayed_total", "match", "service"))
	}
	if in := p.reg.Value(p.t, "pulsar_proxy_sni_bytes_total", "direction", toBroker); in < 3*5000*7 {
		t.Errorf("bytes to the broker: %v", in)
	}
}

// A refused name never reaches a socket: the client gets a fatal alert, the backend no
// connection.
func TestRefusalsReachNoBroker(t *testing.T) {
	ca := certs.NewCA(t, t.TempDir(), "sni")
	b := newBackend(t, ca, false)
	p := startPlane(t, b, ca, nil)
	for _, tc := range []struct {
		name   string
		alert  string
		reason Reason
	}{
		{"evil.test", "unrecognized name", ReasonNotABroker},
		{"b1.test.evil.test", "unrecognized name", ReasonNotABroker},
		{"twin.test", "unrecognized name", ReasonAmbiguous},
		{"127.0.0.1", "unrecognized name", ReasonNoServerName}, // an IP is never sent as a name
	} {
		_, err := p.dialTLS(t, &tls.Config{ServerName: tc.name, InsecureSkipVerify: true})
		if err == nil || !strings.Contains(err.Error(), tc.alert) {
			t.Errorf("%s: %v, want the alert %q", tc.name, err, tc.alert)
		}
		wait.Until(t, 10*time.Second, tc.name+" counted as "+string(tc.reason), func() bool { return p.refused(tc.reason) >= 1 })
	}
	if n := b.accepted.Load(); n != 0 {
		t.Fatalf("the backend accepted %d connections for refused names", n)
	}
}

// What is not a usable ClientHello has its defined outcome each, counted, and reaches no
// broker either.
func TestHelloFailures(t *testing.T) {
	ca := certs.NewCA(t, t.TempDir(), "sni")
	b := newBackend(t, ca, false)
	p := startPlane(t, b, ca, func(c *Config) { c.HandshakeTimeout = 300 * time.Millisecond })
	good := capture(t, &tls.Config{ServerName: "b1.test"})
	for _, tc := range []struct {
		what   string
		send   []byte
		close  bool
		alert  byte // 0: closed without one
		reason Reason
	}{
		{"a plaintext Pulsar CONNECT", []byte{0, 0, 0, 8, 0, 0, 0, 4, 8, 2, 18, 0}, false, 0, ReasonNotTLS},
		{"a malformed hello", hello(0x0303, sniExt("b1.test"), sniExt("evil.test")), false, AlertDecodeError, ReasonMalformed},
		{"nothing at all", nil, false, 0, ReasonHandshakeTimeout},
		{"half a hello, then a close", good[:40], true, 0, ReasonClientGone},
		{"half a hello, then nothing", good[:40], false, 0, ReasonHandshakeTimeout},
	} {
		c, err := net.Dial("tcp", p.addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Write(tc.send)
		if tc.close {
			c.(*net.TCPConn).CloseWrite()
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, _ := io.ReadAll(c)
		c.Close()
		if tc.alert == 0 && len(got) != 0 || tc.alert != 0 && string(got) != string(alertRecord(tc.alert)) {
			t.Errorf("%s: the client read %v", tc.what, got)
		}
		wait.Until(t, 10*time.Second, tc.what+" counted", func() bool { return p.refused(tc.reason) >= 1 })
	}
	if n := b.accepted.Load(); n != 0 {
		t.Fatalf("the backend accepted %d connections", n)
	}
}

// A ClientHello over the limit is refused with handshake_failure; a hello that comes a byte
// per TCP segment is put together and relayed.
func TestHelloSizeAndSegments(t *testing.T) {
	ca := certs.NewCA(t, t.TempDir(), "sni")
	b := newBackend(t, ca, false)
	small := startPlane(t, b, ca, func(c *Config) { c.MaxHelloBytes = 100 })
	if _, err := small.dialTLS(t, &tls.Config{ServerName: "b1.test"}); err == nil || !strings.Contains(err.Error(), "handshake failure") {
		t.Fatalf("a hello over the limit: %v", err)
	}
	wait.Until(t, 10*time.Second, "counted as too large", func() bool { return small.refused(ReasonTooLarge) == 1 })
	p := startPlane(t, b, ca, nil)
	raw, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	c := tls.Client(byteWriter{raw}, p.clientConfig(&tls.Config{ServerName: "b1.test"}))
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	echo(t, c, "split")
}

// byteWriter sends every write a byte per TCP segment.
type byteWriter struct{ net.Conn }

func (w byteWriter) Write(p []byte) (int, error) {
	for i := range p {
		if _, err := w.Conn.Write(p[i : i+1]); err != nil {
			return i, err
		}
		time.Sleep(50 * time.Microsecond)
	}
	return len(p), nil
}

// ECH passes through untouched: the plane routes by the outer (public) name, the broker
// decrypts the inner hello and sees the inner name.
func TestECHRoutedByOuterName(t *testing.T) {
	ca := certs.NewCA(t, t.TempDir(), "sni")
	list, key := echKey(t, "b1.test")
	b := newBackend(t, ca, false, key)
	p := startPlane(t, b, ca, nil)
	c, err := p.dialTLS(t, &tls.Config{ServerName: "b1.test", EncryptedClientHelloConfigList: list, MinVersion: tls.VersionTLS13})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !c.ConnectionState().ECHAccepted {
		t.Fatal("ECH was not accepted end to end")
	}
	echo(t, c, "ech")
}

// With a policy in force the decision point refuses every relay.
func TestPolicyRefusesRelays(t *testing.T) {
	ca := certs.NewCA(t, t.TempDir(), "sni")
	b := newBackend(t, ca, false)
	p := startPlane(t, b, ca, func(c *Config) { c.Gate = gate{refuse: true} })
	if _, err := p.dialTLS(t, &tls.Config{ServerName: "b1.test"}); err == nil || !strings.Contains(err.Error(), "handshake failure") {
		t.Fatalf("under a policy: %v", err)
	}
	wait.Until(t, 10*time.Second, "counted as policy", func() bool { return p.refused(ReasonPolicy) == 1 })
	if b.accepted.Load() != 0 {
		t.Fatal("the relay was not refused before the broker")
	}
}

// A PROXY header from a trusted load balancer names the client; the broker's PROXY header
// (sni.proxyProtocol) carries that address, ahead of the client's TLS.
func TestProxyHeaderInAndOut(t *testing.T) {
	ca := certs.NewCA(t, t.TempDir(), "sni")
	b := newBackend(t, ca, true)
	p := startPlane(t, b, ca, func(c *Config) {
		c.Dialer.ProxyHeader = 2
		c.Proxy = listener.ProxyOptions{Enabled: true, TrustedCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	})
	raw, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	client := &net.TCPAddr{IP: net.ParseIP("203.0.113.9"), Port: 40000}
	if _, err := proxyproto.HeaderProxyFromAddrs(1, client, raw.LocalAddr()).WriteTo(raw); err != nil {
		t.Fatal(err)
	}
	c := tls.Client(raw, p.clientConfig(&tls.Config{ServerName: "b1.test"}))
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	echo(t, c, "hello")
	h := <-b.proxyHdr
	if h.SourceAddr.String() != client.String() {
		t.Fatalf("the broker's PROXY header names %v, want the client %v", h.SourceAddr, client)
	}
}

// Over session.maxConnections, the descriptor budget or a per-IP limit, a connection is
// refused with internal_error and reaches no broker.
func TestConnectionLimits(t *testing.T) {
	ca := certs.NewCA(t, t.TempDir(), "sni")
	b := newBackend(t, ca, false)
	for _, tc := range []struct {
		what   string
		limits connlimit.Limits
		reason Reason
	}{
		{"maxConnections", connlimit.Limits{MaxConnections: 1}, ReasonTooManyConnections},
		{"per IP", connlimit.Limits{MaxPerIP: 1}, ReasonTooManyFromIP},
		{"rate per IP", connlimit.Limits{RatePerIP: 0.001, BurstPerIP: 1}, ReasonConnectRate},
	} {
		p := startPlane(t, b, ca, func(c *Config) { c.Limits = tc.limits })
		first, err := p.dialTLS(t, &tls.Config{ServerName: "b1.test"})
		if err != nil {
			t.Fatalf("%s: the first connection: %v", tc.what, err)
		}
		before := b.accepted.Load()
		if _, err := p.dialTLS(t, &tls.Config{ServerName: "b1.test"}); err == nil || !strings.Contains(err.Error(), "internal error") {
			t.Errorf("%s: the second connection: %v, want internal_error", tc.what, err)
		}
		wait.Until(t, 10*time.Second, tc.what+" counted", func() bool { return p.refused(tc.reason) == 1 })
		if b.accepted.Load() != before {
			t.Errorf("%s: the backend accepted %d more", tc.what, b.accepted.Load()-before)
		}
		first.Close()
	}
}

// A drain stops reading clients, lets the broker's side settle and closes both: the client
// reads what was on its way, then the end of the stream.
func TestDrainHandsOver(t *testing.T) {
	ca := certs.NewCA(t, t.TempDir(), "sni")
	b := newBackend(t, ca, false)
	p := startPlane(t, b, ca, nil)
	c, err := p.dialTLS(t, &tls.Config{ServerName: "b1.test"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	echo(t, c, "before")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("the client's connection stayed open after the drain")
	}
	if v := p.reg.Value(p.t, "pulsar_proxy_sni_closes_total", "reason", string(ReasonDrained)); v != 1 {
		t.Fatalf("closes{drained} = %v", v)
	}
	if !errors.Is(<-p.done, ErrServerClosed) {
		t.Fatal("Serve did not end with ErrServerClosed")
	}
	p.done <- ErrServerClosed
}
