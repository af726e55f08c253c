package session

import (
	"crypto/tls"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/jsonlog"
	"github.com/pulsar-proxy/pulsar-proxy/internal/refusal"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/wait"
)

// refusals records what the sessions report.
type refusals struct {
	mu  sync.Mutex
	got []string // kind/detail/told
}

func (r *refusals) Refused(k refusal.Kind, detail, remote, told string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !strings.HasPrefix(remote, "127.0.0.1:") {
		told = "bad remote " + remote
	}
	r.got = append(r.got, string(k)+"/"+detail+"/"+told)
}

func (r *refusals) waitFor(t *testing.T, want string) {
	t.Helper()
	wait.Until(t, 5*time.Second, "the refusal "+want, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, g := range r.got {
			if strings.HasPrefix(g, want) {
				return true
			}
		}
		return false
	})
}

// A TLS client on the plaintext listener is told apart from garbage: its own close reason
// and refusal kind, and nothing written back (a Pulsar frame would read as a broken record).
func TestTLSHelloOnPlaintextPort(t *testing.T) {
	cfg := testConfig()
	rs := &refusals{}
	cfg.Refusals = rs
	m := NewMetrics(prometheus.NewRegistry())
	addr := serveOn(t, NewServer(cfg, nil, noTargets{}, m, zerolog.Nop()), nil)

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tc := tls.Client(c, &tls.Config{ServerName: "proxy", MinVersion: tls.VersionTLS12})
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err == nil {
		t.Fatal("a TLS handshake with the plaintext port succeeded")
	}
	rs.waitFor(t, "tls_on_plaintext_port//")
	waitCounter(t, m.handshakeFailures.WithLabelValues(string(ReasonTLSOnPlaintext)), 1)
	if n := testutil.ToFloat64(m.handshakeFailures.WithLabelValues(string(ReasonBadFrame))); n != 0 {
		t.Errorf("the TLS client also counted as a bad frame (%v)", n)
	}

	// Garbage that is not TLS is still a bad frame.
	g, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	g.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	g.SetReadDeadline(time.Now().Add(5 * time.Second))
	io.Copy(io.Discard, g)
	rs.waitFor(t, "bad_frame/bad_frame/pulsar-proxy: bad frame")
}

// Refusals carry their detail and what the client was told; the refusal's debug line has no
// key twice (its text once sat in a second "message").
func TestRefusalsAreReported(t *testing.T) {
	sec, _ := testSecurity(t, "", "")
	cfg := testConfig()
	rs := &refusals{}
	cfg.Refusals = rs
	logs := &logBuffer{}
	srv := NewServer(cfg, nil, noTargets{}, NewMetrics(prometheus.NewRegistry()), zerolog.New(logs).Level(zerolog.DebugLevel))
	srv.SetSecurity(sec)
	addr := serveOn(t, srv, nil)

	p := dialPeer(t, addr)
	p.send(connectCmd(func(c *pb.CommandConnect) {
		c.AuthMethodName, c.AuthData = proto.String("token"), []byte("not.a.token")
	}))
	if got := p.recv(); got.GetError().GetError() != pb.ServerError_AuthenticationError {
		t.Fatalf("got %v", got)
	}
	rs.waitFor(t, "authentication_failed/malformed/pulsar-proxy: authentication failed (token): malformed")

	p2 := dialPeer(t, addr)
	p2.send(connectCmd(func(c *pb.CommandConnect) { c.OriginalPrincipal = proto.String("admin") }))
	p2.recv()
	rs.waitFor(t, "bad_frame/forged_proxy_fields/pulsar-proxy: clients may not set original_principal")

	line := logs.waitFor(t, `"message":"refusing client"`)
	if err := jsonlog.CheckLine([]byte(line)); err != nil {
		t.Errorf("%v: %s", err, line)
	}
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if err := jsonlog.CheckLine([]byte(l)); err != nil {
			t.Errorf("%v: %s", err, l)
		}
	}
}
