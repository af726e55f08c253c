package e2e

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/test/wait"
)

// TestLogsSpeakUp: what an operator must act on is logged at warn, once per change or once
// per interval however often it happens, against a real broker and real TLS clients:
//   - a broker that stops answering (its address goes dark) and comes back: one warning each,
//     the first with the probe's reason;
//   - a flood of refused tokens: the first refusal at once, then one summary line with the
//     count by reason;
//   - a TLS client on the plaintext port: a warning of its own, with the client's address.
func TestLogsSpeakUp(t *testing.T) {
	broker := newSwitch(t, strings.TrimPrefix(theRig.Brokers[0].URL, "pulsar://"))
	idp := newKeySet(t)
	p := startProxy(t, []string{"pulsar://" + broker.addr}, fmt.Sprintf(`auth:
  enabled: true
  token:
    jwksURL: %q
    issuers: [%q]
    audience: pulsar
log:
  level: info
  refusalInterval: 3s
`, idp.url, idp.issuer))
	p.waitReady(t)

	// The broker goes dark, then comes back.
	broker.off()
	unreachable := waitLog(t, p, 1, "broker unreachable")
	time.Sleep(2 * time.Second) // four more failed probes: no more warnings
	broker.on(t)
	back := waitLog(t, p, 1, "broker reachable again")
	if n := len(logLines(t, p, "broker unreachable")); n != 1 {
		t.Errorf("%d unreachable warnings for one outage; want 1", n)
	}
	if unreachable[0]["level"] != "warn" || unreachable[0]["reason"] == "" || back[0]["level"] != "warn" {
		t.Errorf("broker lines: %v / %v", unreachable[0], back[0])
	}
	t.Logf("broker down and back:\n%s\n%s", unreachable[0]["_line"], back[0]["_line"])

	// A flood of bad tokens: 300 badly signed, 20 expired.
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	bad, expired := idp.token(t, "mallory", other), expiredToken(t, idp)
	began := time.Now()
	for i := range 320 {
		tok := bad
		if i%16 == 15 {
			tok = expired
		}
		resp, conn := rawConnect(t, p.Addr, func(c *pb.CommandConnect) { c.AuthMethodName, c.AuthData = proto.String("token"), []byte(tok) })
		if resp.GetError().GetError() != pb.ServerError_AuthenticationError {
			t.Fatalf("a bad token got %v", resp)
		}
		conn.Close()
	}
	took := time.Since(began)
	// The flood may straddle an interval: the summaries add up to every refusal but the first.
	var summaries []map[string]any
	var refused, badSig, exp float64
	wait.Until(t, 30*time.Second, "summaries of 319 refusals", func() bool {
		summaries = logLines(t, p, "clients in the last", "authentication_failed")
		refused, badSig, exp = 0, 0, 0
		for _, s := range summaries {
			d, _ := s["details"].(map[string]any)
			refused += s["refused"].(float64)
			badSig += d["bad_signature"].(float64)
			if e, ok := d["expired"].(float64); ok {
				exp += e
			}
		}
		return refused >= 319
	})
	first := logLines(t, p, "refused a client: authentication_failed")
	if len(first) != 1 || refused != 319 || badSig != 299 || exp != 20 {
		t.Errorf("flood of 320: %d single lines; summaries of %v (bad_signature %v, expired %v)", len(first), refused, badSig, exp)
	}
	if limit := int(took/(3*time.Second)) + 2; len(summaries) > limit {
		t.Errorf("%d summary lines for a flood of %s; at most %d (one per 3 s interval)", len(summaries), took, limit)
	}
	t.Logf("a token flood of 320 in %s:\n%s\n%s", took.Round(time.Millisecond), first[0]["_line"], summaries[0]["_line"])

	// A TLS client on the plaintext port.
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", p.Addr, &tls.Config{InsecureSkipVerify: true})
	if err == nil {
		c.Close()
		t.Fatal("a TLS handshake on the plaintext port succeeded")
	}
	tlsLine := waitLog(t, p, 1, "refused a client: tls_on_plaintext_port")
	if tlsLine[0]["level"] != "warn" || !strings.HasPrefix(tlsLine[0]["remote"].(string), "127.0.0.1:") {
		t.Errorf("TLS on plaintext: %v", tlsLine[0])
	}
	if n := p.metric(t, "pulsar_proxy_handshake_failures_total", `reason="tls_on_plaintext_port"`); n != 1 {
		t.Errorf("handshake_failures_total{reason=tls_on_plaintext_port} = %v; want 1", n)
	}
	t.Logf("TLS on the plaintext port (client: %v):\n%s", err, tlsLine[0]["_line"])
}

// expiredToken is a token of the key set's own key that expired an hour ago.
func expiredToken(t *testing.T, k *keySet) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{
		"sub": "alice", "iss": k.issuer, "aud": "pulsar", "iat": time.Now().Add(-2 * time.Hour).Unix(), "exp": time.Now().Add(-time.Hour).Unix(),
	})
	tok.Header["kid"] = "k1"
	s, err := tok.SignedString(k.key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// logLines are the proxy's log lines whose message contains every part, decoded (the raw
// line under "_line").
func logLines(t *testing.T, p *proxy, parts ...string) []map[string]any {
	t.Helper()
	var out []map[string]any
lines:
	for _, line := range strings.Split(proxyLog(t, p), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil {
			continue
		}
		msg, _ := m["message"].(string)
		for _, part := range parts {
			if !strings.Contains(msg, part) {
				continue lines
			}
		}
		m["_line"] = line
		out = append(out, m)
	}
	return out
}

// waitLog waits for at least n lines as logLines finds them.
func waitLog(t *testing.T, p *proxy, n int, parts ...string) []map[string]any {
	t.Helper()
	var got []map[string]any
	wait.Until(t, 30*time.Second, fmt.Sprintf("%d log lines with %q", n, parts), func() bool {
		got = logLines(t, p, parts...)
		return len(got) >= n
	})
	return got
}

// brokerSwitch is a broker's address that can go dark and come back: a forwarder on a port of
// its own to a real broker, whose off closes the listener and every connection through it.
type brokerSwitch struct {
	addr, target string
	mu           sync.Mutex
	ln           net.Listener
	conns        map[net.Conn]bool
}

func newSwitch(t *testing.T, target string) *brokerSwitch {
	t.Helper()
	s := &brokerSwitch{target: target, conns: map[net.Conn]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = ln.Addr().String()
	s.serve(ln)
	t.Cleanup(s.off)
	return s
}

func (s *brokerSwitch) serve(ln net.Listener) {
	s.mu.Lock()
	s.ln = ln
	s.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", s.target)
			if err != nil {
				c.Close()
				continue
			}
			s.mu.Lock()
			s.conns[c], s.conns[up] = true, true
			s.mu.Unlock()
			go func() { io.Copy(up, c); up.Close() }()
			go func() { io.Copy(c, up); c.Close() }()
		}
	}()
}

// off: the address refuses connections and every connection through it breaks.
func (s *brokerSwitch) off() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		s.ln.Close()
		s.ln = nil
	}
	for c := range s.conns {
		c.Close()
		delete(s.conns, c)
	}
}

// on listens on the same address again.
func (s *brokerSwitch) on(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	s.serve(ln)
}
