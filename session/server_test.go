package session

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/connlimit"
	"github.com/pulsar-proxy/pulsar-proxy/internal/listener"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/certs"
)

// readCounter counts the bytes a client receives.
type readCounter struct {
	net.Conn
	n atomic.Int64
}

func (c *readCounter) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.n.Add(int64(n))
	return n, err
}

// closedAtOnce checks that the proxy closed c without sending a byte, well before any
// handshake timeout.
func closedAtOnce(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	n, err := c.Read(make([]byte, 1))
	if n != 0 || err == nil || isTimeout(err) {
		t.Fatalf("read %d bytes, err %v: want the connection closed at once, unanswered", n, err)
	}
}

// Over session.maxConnections a connection is refused in Accept, before its TLS handshake or
// PROXY header: no ServerHello, no goroutine, just a close (a plain client is told why).
func TestMaxConnectionsRefusedBeforeHandshake(t *testing.T) {
	ca := certs.NewCA(t, t.TempDir(), "ca")
	server := ca.Server(t, "proxy", time.Now().Add(time.Hour))
	tc, err := listener.NewTLSConfig(listener.TLSOptions{CertFile: server.CertFile, KeyFile: server.KeyFile, MinVersion: tls.VersionTLS12},
		nil, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	clientTLS := &tls.Config{RootCAs: roots, ServerName: "localhost"}
	proxyOpts := listener.ProxyOptions{Enabled: true, TrustedCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		HeaderTimeout: 30 * time.Second}

	for _, tc := range []struct {
		name string
		o    listener.Options
		dial func(t *testing.T, addr string) net.Conn // a connection that completes its handshake
	}{
		{"tls", listener.Options{TLS: tc}, func(t *testing.T, addr string) net.Conn {
			c, err := tls.Dial("tcp", addr, clientTLS)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}},
		{"proxy protocol", listener.Options{Proxy: proxyOpts}, func(t *testing.T, addr string) net.Conn {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			c.Write(v2HeaderFrom(t, "203.0.113.7:41000"))
			return c
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.MaxConnections = 1
			cfg.HandshakeTimeout = 30 * time.Second // a handshake run for a refused client would outlast the test
			addr, m, _ := startWrappedProxyConfig(t, cfg, nil, tc.o, nil)
			held := peerOn(t, tc.dial(t, addr))
			held.send(connectCmd(nil))
			if got := held.recv(); got.GetType() != pb.BaseCommand_CONNECTED {
				t.Fatalf("held connection got %v", got)
			}

			if tc.o.TLS != nil {
				// A client that sends its ClientHello gets no answer to it.
				raw, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				defer raw.Close()
				rc := &readCounter{Conn: raw}
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				defer cancel()
				if err := tls.Client(rc, clientTLS).HandshakeContext(ctx); err == nil || errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("TLS handshake over the limit: %v, want it closed unanswered", err)
				}
				if n := rc.n.Load(); n != 0 {
					t.Fatalf("the proxy sent %d bytes of TLS handshake to a connection over the limit", n)
				}
			}

			// Silent clients are closed at once, not held by a goroutine until a timeout.
			const silent = 20
			before := runtime.NumGoroutine()
			var conns []net.Conn
			for range silent {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				conns = append(conns, c)
			}
			for _, c := range conns {
				closedAtOnce(t, c)
			}
			if after := runtime.NumGoroutine(); after > before+silent/4 {
				t.Fatalf("%d goroutines after refusing %d connections, %d before", after, silent, before)
			}
			refused := float64(silent)
			if tc.o.TLS != nil {
				refused++
			}
			waitCounter(t, m.handshakeFailures.WithLabelValues(string(ReasonTooManyConnections)), refused)
			waitCounter(t, m.closes.WithLabelValues(string(ReasonTooManyConnections)), refused)
		})
	}
}

// A plain client over session.maxConnections is told why, and once the held connection ends
// a new one is served again.
func TestMaxConnectionsTellsPlainClients(t *testing.T) {
	cfg := testConfig()
	cfg.MaxConnections = 1
	addr, m := startProxy(t, cfg, nil, noTargets{})
	held := dialPeer(t, addr)
	held.send(connectCmd(nil))
	held.recv()

	p := dialPeer(t, addr)
	got := p.recv()
	if got.GetError().GetError() != pb.ServerError_ServiceNotReady || !strings.Contains(got.GetError().GetMessage(), "too many connections") {
		t.Fatalf("got %v, want ServiceNotReady: too many connections", got)
	}
	p.expectClosed()
	waitCounter(t, m.handshakeFailures.WithLabelValues(string(ReasonTooManyConnections)), 1)

	held.c.Close()
	waitCounter(t, m.closes.WithLabelValues(string(ReasonClientClosed)), 1)
	again := dialPeer(t, addr)
	again.send(connectCmd(nil))
	if got := again.recv(); got.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("after the held connection closed: got %v, want CONNECTED", got)
	}
}

// Over the Pulsar listeners' part of the descriptor budget a connection is refused as it is
// accepted (a plain client is told ServiceNotReady), and an ended session gives its place back.
func TestDescriptorBudgetRefusesAtAccept(t *testing.T) {
	cfg := testConfig()
	cfg.Descriptors = connlimit.NewBudget(2, 1, nil).Share("pulsar", 0, 0) // one descriptor
	addr, m := startProxy(t, cfg, nil, noTargets{})
	held := dialPeer(t, addr)
	held.send(connectCmd(nil))
	if got := held.recv(); got.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("got %v, want CONNECTED", got)
	}

	p := dialPeer(t, addr)
	if got := p.recv(); got.GetError().GetError() != pb.ServerError_ServiceNotReady {
		t.Fatalf("over the budget: got %v, want ServiceNotReady", got)
	}
	p.expectClosed()
	waitCounter(t, m.handshakeFailures.WithLabelValues(string(ReasonDescriptors)), 1)
	waitCounter(t, m.closes.WithLabelValues(string(ReasonDescriptors)), 1)

	held.c.Close()
	waitCounter(t, m.closes.WithLabelValues(string(ReasonClientClosed)), 1)
	again := dialPeer(t, addr)
	again.send(connectCmd(nil))
	if got := again.recv(); got.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("after the held connection closed: got %v, want CONNECTED", got)
	}
}

// fakeListener hands out the accept results the test queues, then net.ErrClosed once closed.
type fakeListener struct {
	accepts   chan acceptResult
	closed    chan struct{}
	closeOnce sync.Once
}

type acceptResult struct {
	c   net.Conn
	err error
}

func newFakeListener() *fakeListener {
	return &fakeListener{accepts: make(chan acceptResult, 16), closed: make(chan struct{})}
}

func (l *fakeListener) Accept() (net.Conn, error) {
	select {
	case a := <-l.accepts:
		return a.c, a.err
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *fakeListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return nil
}

func (l *fakeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 6650} }

func acceptErr(errno syscall.Errno) error {
	return &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", errno)}
}

// loopbackPair is a connected pair of TCP sockets.
func loopbackPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	return client, server
}

// Accept errors other than the listener's close (out of descriptors or kernel memory, an
// aborted connection, anything) are retried with backoff; Serve returns only on Shutdown.
func TestServeRetriesAcceptErrors(t *testing.T) {
	logs := &logBuffer{}
	srv := NewServer(testConfig(), nil, noTargets{}, NewMetrics(prometheus.NewRegistry()), zerolog.New(logs))
	ln := newFakeListener()
	for _, err := range []error{acceptErr(syscall.ENFILE), acceptErr(syscall.ENOBUFS), acceptErr(syscall.ENOMEM),
		acceptErr(syscall.ECONNABORTED), errors.New("something else")} {
		ln.accepts <- acceptResult{err: err}
	}
	client, server := loopbackPair(t)
	ln.accepts <- acceptResult{c: server}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	p := peerOn(t, client)
	p.send(connectCmd(nil))
	if got := p.recv(); got.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("got %v, want CONNECTED after the accept errors", got)
	}
	select {
	case err := <-served:
		t.Fatalf("Serve returned %v on an accept error", err)
	default:
	}
	ln.accepts <- acceptResult{err: acceptErr(syscall.EMFILE)} // after a success: a warning again
	logs.waitFor(t, `"level":"warn"`, `too many open files","retry_in_seconds":0.005`)

	lines := strings.Split(logs.String(), "\n")
	var warn, debug int
	for _, l := range lines {
		if strings.Contains(l, "accepting a client connection failed") {
			switch {
			case strings.Contains(l, `"level":"warn"`):
				warn++
			case strings.Contains(l, `"level":"debug"`):
				debug++
			}
		}
	}
	if warn != 2 || debug != 4 {
		t.Fatalf("%d warnings and %d debug lines, want 2 (first of each run) and 4:\n%s", warn, debug, logs)
	}
	for _, want := range []string{"too many open files in system", "no buffer space available", "cannot allocate memory",
		"software caused connection abort", "something else"} {
		logs.waitFor(t, "accepting a client connection failed", want)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(ctx)
	if err := <-served; !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve after Shutdown: %v", err)
	}
}

// A direct session takes its broker connection's descriptor as it dials: with one descriptor
// left after its own, the first client goes direct and the second is told ServiceNotReady
// before any broker is dialled; a lookup connection needs only its own.
func TestDescriptorBudgetCountsTheBrokerConnection(t *testing.T) {
	b, _ := recordingBroker(t, nil)
	cfg := testConfig()
	cfg.Descriptors = connlimit.NewBudget(6, 3, nil).Share("pulsar", 0, 0) // three descriptors
	addr, m := startProxy(t, cfg, nil, oneTarget{b})
	direct := func() *pb.BaseCommand {
		p := dialPeer(t, addr)
		p.send(connectCmd(func(c *pb.CommandConnect) { c.ProxyToBrokerUrl = proto.String(b.Addr()) }))
		return p.recv()
	}
	if got := direct(); got.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("the first direct session: %v, want CONNECTED", got)
	}
	if got := direct(); got.GetError().GetError() != pb.ServerError_ServiceNotReady || !strings.Contains(got.GetError().GetMessage(), "descriptor") {
		t.Fatalf("a direct session with no descriptor left for its broker: %v, want ServiceNotReady", got)
	}
	waitCounter(t, m.closes.WithLabelValues(string(ReasonDescriptors)), 1)
	lookupConn := dialPeer(t, addr)
	lookupConn.send(connectCmd(nil))
	if got := lookupConn.recv(); got.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("a lookup connection on the last descriptor: %v, want CONNECTED", got)
	}
}
