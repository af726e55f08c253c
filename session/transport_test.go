package session

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pires/go-proxyproto"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/authn"
	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/listener"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/certs"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/promtest"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/wait"
)

// logBuffer collects log lines from several goroutines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// waitFor returns the first line containing all of parts.
func (l *logBuffer) waitFor(t *testing.T, parts ...string) string {
	t.Helper()
	var found string
	if wait.Within(10*time.Second, func() bool {
		l.mu.Lock()
		lines := strings.Split(l.b.String(), "\n")
		l.mu.Unlock()
		for _, line := range lines {
			all := true
			for _, p := range parts {
				all = all && strings.Contains(line, p)
			}
			if all {
				found = line
				return true
			}
		}
		return false
	}) {
		return found
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	t.Fatalf("no log line with %q in:\n%s", parts, l.b.String())
	return ""
}

// startWrappedProxy serves sessions on a listener wrapped as main.go does it, logging
// session summaries at info into the returned buffer.
func startWrappedProxy(t *testing.T, sec *Security, o listener.Options) (string, *Metrics, *logBuffer) {
	return startWrappedProxyWith(t, sec, o, nil)
}

func startWrappedProxyWith(t *testing.T, sec *Security, o listener.Options, r Resolver) (string, *Metrics, *logBuffer) {
	t.Helper()
	cfg := testConfig()
	cfg.SummaryLevel = zerolog.InfoLevel
	cfg.HandshakeTimeout = 30 * time.Second // long, so a silent client stays open through a test
	return startWrappedProxyConfig(t, cfg, sec, o, r)
}

func startWrappedProxyConfig(t *testing.T, cfg Config, sec *Security, o listener.Options, r Resolver) (string, *Metrics, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	m := NewMetrics(prometheus.NewRegistry())
	srv := NewServer(cfg, r, noTargets{}, m, zerolog.New(logs))
	if sec != nil {
		srv.SetSecurity(*sec)
	}
	addr := serveOn(t, srv, func(ln net.Listener) net.Listener { return listener.Wrap(ln, o) })
	return addr, m, logs
}

func peerOn(t *testing.T, c net.Conn) *peer {
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return &peer{t: t, c: c, r: frame.NewReader(c, frame.DefaultMaxFrameSize)}
}

func v2HeaderFrom(t *testing.T, src string) []byte {
	from, to := netip.MustParseAddrPort(src), netip.MustParseAddrPort("192.0.2.1:6650")
	if from.Addr().Is6() {
		to = netip.MustParseAddrPort("[2001:db8::80]:6650") // the header's two addresses are one family
	}
	h := proxyproto.HeaderProxyFromAddrs(2, net.TCPAddrFromAddrPort(from), net.TCPAddrFromAddrPort(to))
	b, err := h.Format()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestProxyHeaderAddressIsTheSessionsRemote(t *testing.T) {
	o := listener.Options{Proxy: listener.ProxyOptions{Enabled: true,
		TrustedCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, HeaderTimeout: 5 * time.Second}}
	addr, m, logs := startWrappedProxy(t, nil, o)

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	p := peerOn(t, c)
	c.Write(v2HeaderFrom(t, "203.0.113.7:41000"))
	p.send(connectCmd(nil))
	if got := p.recv(); got.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("got %v, want CONNECTED", got)
	}
	c.Close()
	logs.waitFor(t, `"remote":"203.0.113.7:41000"`, "session ended")

	// The same header from a source outside trustedCIDRs is refused before any session.
	o.Proxy.TrustedCIDRs = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	addr2, m2, logs2 := startWrappedProxy(t, nil, o)
	c2, err := net.Dial("tcp", addr2)
	if err != nil {
		t.Fatal(err)
	}
	p2 := peerOn(t, c2)
	c2.Write(v2HeaderFrom(t, "203.0.113.7:41000"))
	p2.send(connectCmd(nil))
	p2.expectClosed()
	waitCounter(t, m2.handshakeFailures.WithLabelValues(string(ReasonTransportSetup)), 1)
	logs2.waitFor(t, `"reason":"transport_setup_failed"`)
	if strings.Contains(logs2.String(), "203.0.113.7") {
		t.Fatal("an untrusted header's address was used")
	}
	waitCounter(t, m.closes.WithLabelValues(string(ReasonClientClosed)), 1)
}

func TestMutualTLSRole(t *testing.T) {
	dir := t.TempDir()
	ca := certs.NewCA(t, dir, "ca")
	server := ca.Server(t, "proxy", time.Now().Add(time.Hour))
	alice := ca.Client(t, "alice")
	lm := listener.NewMetrics(prometheus.NewRegistry())
	tc, err := listener.NewTLSConfig(listener.TLSOptions{CertFile: server.CertFile, KeyFile: server.KeyFile,
		MinVersion: tls.VersionTLS12, ClientCAFile: ca.CertFile, ClientAuth: "request"}, lm, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	tp, err := authn.NewTokenProvider(authn.TokenConfig{SecretKey: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	am := promtest.New()
	sec := &Security{Authenticator: authn.NewAuthenticator("", tp, authn.TLSProvider{}), Metrics: authn.NewMetrics(am)}
	addr, _, logs := startWrappedProxy(t, sec, listener.Options{TLS: tc, Metrics: lm})

	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	pair, err := tls.LoadX509KeyPair(alice.CertFile, alice.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	withTLSMethod := func(c *pb.CommandConnect) { c.AuthMethodName = proto.String("tls") }

	// A client that connects and then says nothing holds a session goroutine, not Accept.
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()

	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "localhost", Certificates: []tls.Certificate{pair}})
	if err != nil {
		t.Fatal(err)
	}
	p := peerOn(t, c)
	p.send(connectCmd(withTLSMethod))
	if got := p.recv(); got.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("certificate of alice: got %v, want CONNECTED", got)
	}
	c.Close()
	logs.waitFor(t, `"principal":"alice"`, "session ended")
	// Had the handshake run in Accept, alice would have waited for the silent client to
	// time out and be closed; it is still open.
	silent.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := silent.Read(make([]byte, 1)); !isTimeout(err) {
		t.Fatalf("silent client: %v, want still open", err)
	}

	// Without a certificate the tls method has nothing to go on.
	c2, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	p2 := peerOn(t, c2)
	p2.send(connectCmd(withTLSMethod))
	if got := p2.recv(); got.GetError().GetError() != pb.ServerError_AuthenticationError {
		t.Fatalf("no certificate: got %v, want AuthenticationError", got)
	}
	am.Wait(t, "pulsar_proxy_authentication_failures_total", 1, "method", "tls", "reason", string(authn.ReasonNoCertificate))
}

// A session on a PROXY-protocol conn forwards on the bare socket (splice), since nothing
// was read past the v2 header; a TLS session cannot.
func TestProxyHeaderKeepsTheSocketForSplice(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := listener.Wrap(raw, listener.Options{Proxy: listener.ProxyOptions{Enabled: true,
		TrustedCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}})
	defer ln.Close()
	c, err := net.Dial("tcp", raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(v2HeaderFrom(t, "203.0.113.7:41000"))
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(testConfig(), nil, noTargets{}, NewMetrics(prometheus.NewRegistry()), zerolog.Nop())
	sess := newSession(srv, sc, 1)
	defer sess.cancel()
	defer sc.Close()
	if err := sess.prepare(); err != nil {
		t.Fatal(err)
	}
	if _, ok := sess.client.conn.(*net.TCPConn); !ok {
		t.Fatalf("client conn is %T: the pipe would not splice", sess.client.conn)
	}
	if got := sess.conn.RemoteAddr().String(); got != "203.0.113.7:41000" {
		t.Fatalf("remote %s", got)
	}
}
