package listener

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pires/go-proxyproto"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/certs"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/wait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// accepted is what the test server saw of one connection.
type accepted struct {
	remote     net.Addr
	err        error
	spliceable bool
}

// serve accepts on a wrapped loopback listener, runs each conn's handshake and then echoes.
func serve(t *testing.T, o Options) (string, <-chan accepted) {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := Wrap(raw, o)
	out := make(chan accepted, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				err := c.(*Conn).HandshakeContext(ctx)
				_, splice := c.(*Conn).TCPConn()
				out <- accepted{remote: c.RemoteAddr(), err: err, spliceable: splice}
				if err == nil {
					io.Copy(c, c)
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return raw.Addr().String(), out
}

func result(t *testing.T, ch <-chan accepted) accepted {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(20 * time.Second):
		t.Fatal("no handshake result")
		return accepted{}
	}
}

func echo(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if string(got) != msg {
		t.Fatalf("echo %q, want %q", got, msg)
	}
}

type tlsFixture struct {
	ca, other *certs.CA
	server    certs.Pair
	metrics   *Metrics
	cfg       *tls.Config
	pool      *x509.CertPool
}

func newTLSFixture(t *testing.T, clientAuth string) *tlsFixture {
	dir := t.TempDir()
	f := &tlsFixture{ca: certs.NewCA(t, dir, "ca"), other: certs.NewCA(t, dir, "other")}
	f.server = f.ca.Server(t, "server", time.Now().Add(24*time.Hour))
	f.metrics = NewMetrics(prometheus.NewRegistry())
	var err error
	f.cfg, err = NewTLSConfig(TLSOptions{
		CertFile: f.server.CertFile, KeyFile: f.server.KeyFile, MinVersion: tls.VersionTLS12,
		ClientCAFile: f.ca.CertFile, ClientAuth: clientAuth, checkEvery: time.Millisecond,
	}, f.metrics, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	f.pool = x509.NewCertPool()
	f.pool.AddCert(f.ca.Cert)
	return f
}

func (f *tlsFixture) count(result string) float64 {
	return testutil.ToFloat64(f.metrics.handshakes.WithLabelValues(result))
}

func dialTLS(t *testing.T, addr string, cfg *tls.Config) (*tls.Conn, error) {
	t.Helper()
	d := &net.Dialer{Timeout: 10 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, cfg)
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

func TestTLSCertificateReload(t *testing.T) {
	f := newTLSFixture(t, "none")
	addr, results := serve(t, Options{TLS: f.cfg, Metrics: f.metrics})
	clientCfg := &tls.Config{RootCAs: f.pool, ServerName: "localhost"}

	old, err := dialTLS(t, addr, clientCfg)
	if err != nil {
		t.Fatal(err)
	}
	echo(t, old, "before renewal")
	if r := result(t, results); r.err != nil {
		t.Fatal(r.err)
	}
	if got := old.ConnectionState().PeerCertificates[0].SerialNumber; got.Cmp(f.server.Cert.SerialNumber) != 0 {
		t.Fatalf("served serial %v, want %v", got, f.server.Cert.SerialNumber)
	}
	if got := testutil.ToFloat64(f.metrics.expiry); got != float64(f.server.Cert.NotAfter.Unix()) {
		t.Fatalf("expiry gauge %v, want %v", got, f.server.Cert.NotAfter.Unix())
	}

	// A broken renewal (key that does not match) keeps the old certificate.
	renewed := f.ca.Server(t, "renewed", time.Now().Add(48*time.Hour))
	copyFile(t, renewed.CertFile, f.server.CertFile)
	touch(t, f.server.CertFile, time.Now().Add(time.Minute))
	c, err := dialTLS(t, addr, clientCfg)
	if err != nil {
		t.Fatal(err)
	}
	result(t, results)
	if got := c.ConnectionState().PeerCertificates[0].SerialNumber; got.Cmp(f.server.Cert.SerialNumber) != 0 {
		t.Fatalf("half-written renewal: served serial %v, want the old %v", got, f.server.Cert.SerialNumber)
	}

	// The key arrives: new handshakes get the renewed certificate.
	copyFile(t, renewed.KeyFile, f.server.KeyFile)
	touch(t, f.server.KeyFile, time.Now().Add(2*time.Minute))
	wait.Until(t, 5*time.Second, "the renewed certificate to be served", func() bool {
		c, err := dialTLS(t, addr, clientCfg)
		if err != nil {
			t.Fatal(err)
		}
		result(t, results)
		return c.ConnectionState().PeerCertificates[0].SerialNumber.Cmp(renewed.Cert.SerialNumber) == 0
	})
	if got := testutil.ToFloat64(f.metrics.expiry); got != float64(renewed.Cert.NotAfter.Unix()) {
		t.Fatalf("expiry gauge %v, want the renewed %v", got, renewed.Cert.NotAfter.Unix())
	}
	echo(t, old, "the session from before the renewal still flows")
	if f.count("error") != 0 {
		t.Fatalf("%v handshake errors", f.count("error"))
	}
}

func copyFile(t *testing.T, from, to string) {
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// touch sets an mtime that surely differs from the last one, whatever the file system's
// timestamp granularity.
func touch(t *testing.T, path string, at time.Time) {
	if err := os.Chtimes(path, at, at); err != nil {
		t.Fatal(err)
	}
}

func TestTLSRefusalsAreCountedAndHarmless(t *testing.T) {
	f := newTLSFixture(t, "require")
	addr, results := serve(t, Options{TLS: f.cfg, Metrics: f.metrics})
	good := f.ca.Client(t, "alice")
	goodPair, err := tls.LoadX509KeyPair(good.CertFile, good.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	untrusted := f.other.Client(t, "mallory")
	badPair, err := tls.LoadX509KeyPair(untrusted.CertFile, untrusted.KeyFile)
	if err != nil {
		t.Fatal(err)
	}

	refusals := []struct {
		name string
		dial func() error
	}{
		{"plaintext client", func() error {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				return err
			}
			defer c.Close()
			// A Pulsar frame header where a ClientHello belongs.
			c.Write([]byte{0, 0, 0, 20, 0, 0, 0, 16, 8, 2, 18, 12})
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			io.Copy(io.Discard, c)
			return nil
		}},
		{"untrusted client certificate", func() error {
			c, err := dialTLS(t, addr, &tls.Config{RootCAs: f.pool, ServerName: "localhost", Certificates: []tls.Certificate{badPair}})
			if err == nil {
				// TLS 1.3: the client learns of the refusal on its first read.
				c.SetReadDeadline(time.Now().Add(10 * time.Second))
				_, err = c.Read(make([]byte, 1))
			}
			if err == nil {
				t.Error("untrusted client certificate accepted")
			}
			return nil
		}},
		{"TLS 1.1 client", func() error {
			_, err := dialTLS(t, addr, &tls.Config{RootCAs: f.pool, ServerName: "localhost", Certificates: []tls.Certificate{goodPair},
				MinVersion: tls.VersionTLS11, MaxVersion: tls.VersionTLS11})
			if err == nil {
				t.Error("TLS 1.1 accepted")
			}
			return nil
		}},
	}
	for i, r := range refusals {
		if err := r.dial(); err != nil {
			t.Fatalf("%s: %v", r.name, err)
		}
		if a := result(t, results); a.err == nil {
			t.Fatalf("%s: handshake succeeded", r.name)
		}
		if got := f.count("error"); got != float64(i+1) {
			t.Fatalf("%s: %v handshake errors counted, want %d", r.name, got, i+1)
		}
		// The listener is unaffected: a good client gets through.
		c, err := dialTLS(t, addr, &tls.Config{RootCAs: f.pool, ServerName: "localhost", Certificates: []tls.Certificate{goodPair}})
		if err != nil {
			t.Fatalf("after %s: %v", r.name, err)
		}
		echo(t, c, "still serving")
		if a := result(t, results); a.err != nil {
			t.Fatalf("after %s: %v", r.name, a.err)
		}
	}
	if got := f.count("ok"); got != float64(len(refusals)) {
		t.Fatalf("%v successful handshakes counted, want %d", got, len(refusals))
	}
}

func TestTLSClientCertificateReachesConn(t *testing.T) {
	f := newTLSFixture(t, "request")
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := Wrap(raw, Options{TLS: f.cfg, Metrics: f.metrics})
	defer ln.Close()
	alice := f.ca.Client(t, "alice")
	pair, err := tls.LoadX509KeyPair(alice.CertFile, alice.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, withCert := range []bool{true, false} {
		cfg := &tls.Config{RootCAs: f.pool, ServerName: "localhost"}
		if withCert {
			cfg.Certificates = []tls.Certificate{pair}
		}
		go func() {
			if c, err := dialTLS(t, raw.Addr().String(), cfg); err == nil {
				c.Write([]byte("x"))
			}
		}()
		c, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		conn := c.(*Conn)
		if err := conn.HandshakeContext(context.Background()); err != nil {
			t.Fatal(err)
		}
		st, ok := conn.TLS()
		if !ok {
			t.Fatal("no TLS state")
		}
		if withCert && (len(st.VerifiedChains) == 0 || st.PeerCertificates[0].Subject.CommonName != "alice") {
			t.Fatalf("verified client certificate missing: %+v", st.PeerCertificates)
		}
		if !withCert && len(st.PeerCertificates) != 0 {
			t.Fatal("certificate from nowhere")
		}
		if _, ok := conn.TCPConn(); ok {
			t.Fatal("a TLS conn must not expose its socket for splicing")
		}
		conn.Close()
	}
}

func TestTLSConfigErrors(t *testing.T) {
	f := newTLSFixture(t, "none")
	for name, o := range map[string]TLSOptions{
		"cipher":        {MinVersion: tls.VersionTLS12, CipherSuites: []string{"TLS_NOPE"}},
		"clientAuth":    {MinVersion: tls.VersionTLS12, ClientAuth: "maybe"},
		"no CA":         {MinVersion: tls.VersionTLS12, ClientAuth: "require"},
		"missing files": {MinVersion: tls.VersionTLS12, CertFile: "/nonexistent", KeyFile: "/nonexistent"},
	} {
		if o.CertFile == "" {
			o.CertFile, o.KeyFile = f.server.CertFile, f.server.KeyFile
		}
		if _, err := NewTLSConfig(o, f.metrics, zerolog.Nop()); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	cfg, err := NewTLSConfig(TLSOptions{CertFile: f.server.CertFile, KeyFile: f.server.KeyFile, MinVersion: tls.VersionTLS13,
		CipherSuites: []string{"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"}}, f.metrics, zerolog.Nop())
	if err != nil || cfg.MinVersion != tls.VersionTLS13 || len(cfg.CipherSuites) != 1 {
		t.Fatalf("cfg %+v, err %v", cfg, err)
	}
}

func proxyOpts(trusted string, require bool, timeout time.Duration) Options {
	return Options{Proxy: ProxyOptions{Enabled: true, TrustedCIDRs: []netip.Prefix{netip.MustParsePrefix(trusted)},
		RequireHeader: require, HeaderTimeout: timeout}}
}

func v2Header(t testing.TB, src string) []byte {
	h := proxyproto.HeaderProxyFromAddrs(2, net.TCPAddrFromAddrPort(netip.MustParseAddrPort(src)),
		net.TCPAddrFromAddrPort(netip.MustParseAddrPort("192.0.2.1:6650")))
	b, err := h.Format()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func dialRaw(t *testing.T, addr string) net.Conn {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestProxyHeader(t *testing.T) {
	t.Run("trusted v2 sets the client address and keeps the socket spliceable", func(t *testing.T) {
		addr, results := serve(t, proxyOpts("127.0.0.0/8", true, 5*time.Second))
		c := dialRaw(t, addr)
		c.Write(append(v2Header(t, "203.0.113.7:41000"), "first frame"...))
		a := result(t, results)
		if a.err != nil {
			t.Fatal(a.err)
		}
		if a.remote.String() != "203.0.113.7:41000" {
			t.Fatalf("remote %s, want the header's 203.0.113.7:41000", a.remote)
		}
		if !a.spliceable {
			t.Fatal("nothing was read past the header, yet the socket is not exposed")
		}
		// Nothing lost: the bytes sent with the header come back.
		got := make([]byte, len("first frame"))
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(c, got); err != nil || string(got) != "first frame" {
			t.Fatalf("got %q, %v", got, err)
		}
	})
	t.Run("trusted v1", func(t *testing.T) {
		addr, results := serve(t, proxyOpts("127.0.0.0/8", true, 5*time.Second))
		c := dialRaw(t, addr)
		c.Write([]byte("PROXY TCP4 198.51.100.9 192.0.2.1 5555 6650\r\n"))
		if a := result(t, results); a.err != nil || a.remote.String() != "198.51.100.9:5555" {
			t.Fatalf("remote %v, err %v", a.remote, a.err)
		}
		echo(t, c, "after v1")
	})
	t.Run("untrusted source with a header is refused", func(t *testing.T) {
		addr, results := serve(t, proxyOpts("10.0.0.0/8", false, 5*time.Second))
		c := dialRaw(t, addr)
		c.Write(v2Header(t, "203.0.113.7:41000"))
		if a := result(t, results); !errors.Is(a.err, errUntrustedHeader) {
			t.Fatalf("err %v, want errUntrustedHeader", a.err)
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatal("connection not closed")
		}
	})
	t.Run("trusted source without a header", func(t *testing.T) {
		for _, require := range []bool{false, true} {
			addr, results := serve(t, proxyOpts("127.0.0.0/8", require, 5*time.Second))
			c := dialRaw(t, addr)
			c.Write([]byte{0, 0, 0, 9, 'p', 'u', 'l', 's', 'a', 'r', '!', '!', '!'})
			a := result(t, results)
			if require {
				if !errors.Is(a.err, errMissingHeader) {
					t.Fatalf("required header: err %v", a.err)
				}
				continue
			}
			if a.err != nil {
				t.Fatal(a.err)
			}
			if !strings.HasPrefix(a.remote.String(), "127.0.0.1:") {
				t.Fatalf("remote %s", a.remote)
			}
			// The bytes peeked while looking for a header are not lost.
			got := make([]byte, 13)
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, []byte{0, 0, 0, 9, 'p', 'u', 'l', 's', 'a', 'r', '!', '!', '!'}) {
				t.Fatalf("got %q, %v", got, err)
			}
		}
	})
	t.Run("a header that never completes times out", func(t *testing.T) {
		addr, results := serve(t, proxyOpts("127.0.0.0/8", false, 100*time.Millisecond))
		c := dialRaw(t, addr)
		c.Write(v2Header(t, "203.0.113.7:41000")[:14])
		if a := result(t, results); !errors.Is(a.err, errHeaderTimeout) {
			t.Fatalf("err %v, want errHeaderTimeout", a.err)
		}
	})
	t.Run("PROXY header then TLS", func(t *testing.T) {
		f := newTLSFixture(t, "none")
		o := proxyOpts("127.0.0.0/8", true, 5*time.Second)
		o.TLS, o.Metrics = f.cfg, f.metrics
		addr, results := serve(t, o)
		c := dialRaw(t, addr)
		c.Write(v2Header(t, "[2001:db8::1]:443"))
		tc := tls.Client(c, &tls.Config{RootCAs: f.pool, ServerName: "localhost"})
		echo(t, tc, "over TLS after the header")
		if a := result(t, results); a.err != nil || a.remote.String() != "[2001:db8::1]:443" {
			t.Fatalf("remote %v, err %v", a.remote, a.err)
		}
	})
}

func TestWrapWithoutFeaturesKeepsListener(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if Wrap(raw, Options{}) != raw {
		t.Fatal("a listener with neither TLS nor PROXY protocol must stay bare, for splice")
	}
}
