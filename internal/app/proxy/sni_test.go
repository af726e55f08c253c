package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/internal/config"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/certs"
)

// The SNI listener is wired to the live set: a TLS client naming the broker discovery lists
// (pulsar+ssl://localhost) reaches it through the proxy, end to end; any other name gets an
// alert. The startup line names the listener.
func TestSNIListenerRelaysToDiscoveredBroker(t *testing.T) {
	ca := certs.NewCA(t, t.TempDir(), "sni")
	pair := ca.ServerFor(t, "broker", time.Now().Add(time.Hour), "localhost")
	cert, err := tls.LoadX509KeyPair(pair.CertFile, pair.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	file := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(file, []byte("listen: {pulsar: \"\", pulsarSNI: \"127.0.0.1:0\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(file, []string{
		"PULSAR_PROXY_LISTEN_HTTP=127.0.0.1:0", "PULSAR_PROXY_DISCOVERY_STATIC_BROKERS=pulsar+ssl://localhost:" + port,
		"PULSAR_PROXY_BROKER_ALLOWED_PORTS=" + port, "PULSAR_PROXY_BROKER_TLS_ENABLED=true",
		"PULSAR_PROXY_BROKER_TLS_TRUST_CERTS_FILE=" + ca.CertFile, "PULSAR_PROXY_SESSION_DRAIN_TIMEOUT=2s"})
	if err != nil {
		t.Fatal(err)
	}
	var log logBuffer
	_, addrs := run(t, cfg, &log, nil)
	if addrs.PulsarSNI == "" || addrs.Pulsar != "" {
		t.Fatalf("addresses %+v, want only the SNI listener", addrs)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	c, err := tls.Dial("tcp", addrs.PulsarSNI, &tls.Config{ServerName: "localhost", RootCAs: roots})
	if err != nil {
		t.Fatalf("through the SNI listener: %v", err)
	}
	io.WriteString(c, "ping")
	got := make([]byte, 4)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "ping" {
		t.Fatalf("echo through the SNI listener: %q %v", got, err)
	}
	c.Close()
	if _, err := tls.Dial("tcp", addrs.PulsarSNI, &tls.Config{ServerName: "elsewhere.example", RootCAs: roots}); err == nil || !strings.Contains(err.Error(), "unrecognized name") {
		t.Fatalf("a name discovery does not list: %v", err)
	}
	if !strings.Contains(log.String(), `"pulsar_sni":"`+addrs.PulsarSNI+`"`) {
		t.Errorf("the startup line does not name the SNI listener:\n%s", log.String())
	}
}
