package proxy

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/config"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/certs"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/prereq"
)

// startProxy builds the proxy of env (beside listeners on 127.0.0.1 and a static broker that
// is never dialled: nothing here looks a topic up), runs it, and drains it when the test
// ends.
func startProxy(t *testing.T, env ...string) (*Proxy, Addrs) {
	t.Helper()
	cfg, err := config.Load("", append([]string{
		"PULSAR_PROXY_LISTEN_PULSAR=127.0.0.1:0", "PULSAR_PROXY_LISTEN_HTTP=127.0.0.1:0",
		"PULSAR_PROXY_DISCOVERY_STATIC_BROKERS=pulsar://127.0.0.1:6650", "PULSAR_PROXY_SESSION_DRAIN_TIMEOUT=1s",
	}, env...))
	if err != nil {
		t.Fatal(err)
	}
	return run(t, cfg, io.Discard, nil)
}

// openFiles is the number of descriptors this process holds.
func openFiles(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	prereq.Need(t, "/proc/self/fd to count descriptors", err)
	return len(ents)
}

// dialFrom connects to addr from the loopback address src; it skips the test where the system
// cannot bind src (only Linux routes all of 127/8 to loopback).
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("tcp", addr)
	if errors.Is(err, syscall.EADDRNOTAVAIL) {
		prereq.Need(t, "a connection from "+src, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Finding: many half-sent HTTP requests from one address held a descriptor each, whatever
// session.maxConnectionsPerIP said, until the process ran out of them. The HTTP listener now
// holds only the per-IP cap of them; another address's request and a Pulsar client (of the
// same address: its count is the Pulsar listener's own) are served at once.
func TestHTTPListenerHoldsOnlyThePerIPCapOfHalfSentRequests(t *testing.T) {
	const perIP, flood = 5, 400
	_, addrs := startProxy(t, fmt.Sprintf("PULSAR_PROXY_SESSION_MAX_CONNECTIONS_PER_IP=%d", perIP))
	httpAddr := addrs.HTTP
	before := openFiles(t)
	conns := make([]net.Conn, 0, flood)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range flood {
		c := dialFrom(t, "127.0.0.1", httpAddr)
		conns = append(conns, c)
		fmt.Fprintf(c, "GET /admin/v2/clusters HTTP/1.1\r\nHost: proxy\r\n") // never finished
	}

	// The listener accepts in order: once this later connection is served, every one of the
	// flood has been accepted and either held or closed.
	other := dialFrom(t, "127.0.0.2", httpAddr)
	defer other.Close()
	other.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(other, "GET /healthz HTTP/1.1\r\nHost: proxy\r\n\r\n")
	status, err := bufio.NewReader(other).ReadString('\n')
	if err != nil || !strings.HasPrefix(status, "HTTP/1.1 200") {
		t.Fatalf("a request from another address during the flood: %q, %v", status, err)
	}
	// This process holds both ends: the flood's client ends, the other request's two, and
	// whatever of the flood the proxy kept.
	if held := openFiles(t) - before - flood - 2; held > perIP+5 {
		t.Fatalf("the proxy holds %d descriptors for %d half-sent requests from one address; want about session.maxConnectionsPerIP (%d)",
			held, flood, perIP)
	}

	pc := dialFrom(t, "127.0.0.1", addrs.Pulsar)
	defer pc.Close()
	pc.SetDeadline(time.Now().Add(10 * time.Second))
	connect := &pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: &pb.CommandConnect{
		ClientVersion: proto.String("test"), ProtocolVersion: proto.Int32(21)}}
	if err := frame.WriteCommand(pc, connect); err != nil {
		t.Fatal(err)
	}
	f, err := frame.NewReader(pc, frame.DefaultMaxFrameSize).ReadFrame()
	if err != nil {
		t.Fatalf("a Pulsar client during the HTTP flood got no answer: %v", err)
	}
	if cmd, err := frame.Decode(f.Command); err != nil || cmd.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("a Pulsar client during the HTTP flood got %v, %v; want CONNECTED", cmd, err)
	}
}

// TestTLSOnly: with listen.pulsar empty and listen.pulsarTLS set (a TLS-only proxy) no
// plaintext Pulsar port is opened; the startup line names the TLS listener alone, a client
// over TLS completes CONNECT and LOOKUP, the proxy is ready, and it drains and stops.
func TestTLSOnly(t *testing.T) {
	broker := startBroker(t)
	dir := t.TempDir()
	ca := certs.NewCA(t, dir, "proxy")
	server := ca.Server(t, "proxy", time.Now().Add(time.Hour))
	file := filepath.Join(dir, "config.yaml")
	_, port, _ := net.SplitHostPort(broker.Addr)
	yaml := fmt.Sprintf("listen: {pulsar: \"\", pulsarTLS: \"127.0.0.1:0\", http: \"127.0.0.1:0\"}\n"+
		"tls: {certFile: %q, keyFile: %q}\n"+
		"discovery: {static: {brokers: [\"pulsar://%s\"]}}\nbroker: {allowedPorts: [%s]}\nsession: {drainTimeout: 2s}\n",
		server.CertFile, server.KeyFile, broker.Addr, port)
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	var log logBuffer
	_, a := run(t, cfg, &log, nil)
	if a.Pulsar != "" || a.PulsarTLS == "" {
		t.Fatalf("addresses %+v, want a TLS listener and no plaintext one", a)
	}
	started := ""
	for _, line := range strings.Split(log.String(), "\n") {
		if strings.Contains(line, "pulsar-proxy started") {
			started = line
		}
	}
	if !strings.Contains(started, `"pulsar_tls":"`+a.PulsarTLS+`"`) || strings.Contains(started, `"pulsar":`) {
		t.Errorf("startup line %q: want pulsar_tls %s and no pulsar key", started, a.PulsarTLS)
	}

	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", a.PulsarTLS, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	r := frame.NewReader(c, frame.DefaultMaxFrameSize)
	connect := &pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: &pb.CommandConnect{
		ClientVersion: proto.String("test"), ProtocolVersion: proto.Int32(21)}}
	if err := frame.WriteCommand(c, connect); err != nil {
		t.Fatal(err)
	}
	if cmd, err := r.ReadCommand(); err != nil || cmd.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("CONNECT over TLS: got %v, %v; want CONNECTED", cmd, err)
	}
	checkLookup(t, c, r, broker.Addr)
	checkHTTP(t, "http://"+a.HTTP, "test")
}
