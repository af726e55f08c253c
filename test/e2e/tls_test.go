package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/certs"
	"github.com/pulsar-proxy/pulsar-proxy/test/wait"
)

// TestTLSProduceConsumeThroughProxy: pulsar-client-go over pulsar+ssl:// to the proxy
// (certificate checked against the test CA, hostname verified), plaintext brokers behind.
func TestTLSProduceConsumeThroughProxy(t *testing.T) {
	dir := t.TempDir()
	ca := certs.NewCA(t, dir, "ca")
	server := ca.Server(t, "proxy", time.Now().Add(24*time.Hour))
	proxy := startProxy(t, brokerURLs(), fmt.Sprintf("tls:\n  certFile: %q\n  keyFile: %q\n", server.CertFile, server.KeyFile))
	if proxy.PulsarTLSURL == "" {
		t.Fatal("no TLS listener started")
	}

	c := newTLSClient(t, proxy.PulsarTLSURL, ca.CertFile, nil)
	topic := uniqueTopic(t, "tls")
	consumer := subscribe(t, c, topic, "s", pulsar.Exclusive)
	sent := produce(t, c, topic, 1000)
	consumeAll(t, consumer, sent)

	if n := proxy.metric(t, "pulsar_proxy_tls_handshakes_total", `result="ok"`); n < 1 {
		t.Errorf("%v successful TLS handshakes counted", n)
	}
	if got := proxy.metric(t, "pulsar_proxy_tls_certificate_expiry_timestamp_seconds"); got != float64(server.Cert.NotAfter.Unix()) {
		t.Errorf("expiry gauge %v, want %v", got, server.Cert.NotAfter.Unix())
	}

	// A plaintext Pulsar client on the TLS port fails its handshake, is counted, and the
	// proxy carries on.
	raw, err := net.Dial("tcp", proxy.TLSAddr)
	if err != nil {
		t.Fatal(err)
	}
	raw.Write([]byte{0, 0, 0, 20, 0, 0, 0, 16, 8, 2, 18, 12})
	raw.SetReadDeadline(time.Now().Add(30 * time.Second))
	io.Copy(io.Discard, raw)
	raw.Close()
	wait.Until(t, 10*time.Second, "the plaintext client on the TLS port to be counted as a handshake error", func() bool {
		return proxy.count(t, "pulsar_proxy_tls_handshakes_total", `result="error"`) >= 1
	})
	more := produce(t, c, topic, 10)
	consumeAll(t, consumer, more)
}

// TestTLSCertificateRenewedOnDisk: the certificate is replaced under the running binary;
// new handshakes present the new one, the session opened before keeps flowing.
func TestTLSCertificateRenewedOnDisk(t *testing.T) {
	dir := t.TempDir()
	ca := certs.NewCA(t, dir, "ca")
	first := ca.Server(t, "proxy", time.Now().Add(24*time.Hour))
	proxy := startProxy(t, brokerURLs(), fmt.Sprintf("tls:\n  certFile: %q\n  keyFile: %q\n", first.CertFile, first.KeyFile))
	c := newTLSClient(t, proxy.PulsarTLSURL, ca.CertFile, nil)
	topic := uniqueTopic(t, "tlsrenew")
	consumer := subscribe(t, c, topic, "s", pulsar.Exclusive)
	consumeAll(t, consumer, produce(t, c, topic, 100))

	// Renew: new key and certificate written over the files, as cert-manager does.
	renewed := ca.Server(t, "renewed", time.Now().Add(48*time.Hour))
	for from, to := range map[string]string{renewed.KeyFile: first.KeyFile, renewed.CertFile: first.CertFile} {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to+".tmp", b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(to+".tmp", to); err != nil {
			t.Fatal(err)
		}
		later := time.Now().Add(time.Minute) // an mtime that surely differs
		os.Chtimes(to, later, later)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	var serial *big.Int
	if !wait.Within(10*time.Second, func() bool {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", proxy.TLSAddr,
			&tls.Config{RootCAs: pool, ServerName: "localhost"})
		if err != nil {
			t.Fatal(err)
		}
		serial = conn.ConnectionState().PeerCertificates[0].SerialNumber
		conn.Close()
		return serial.Cmp(renewed.Cert.SerialNumber) == 0
	}) {
		t.Fatalf("still serving serial %v 10 s after the renewal", serial)
	}
	// The client's connections from before the renewal still carry its traffic.
	consumeAll(t, consumer, produce(t, c, topic, 100))
	if got := proxy.metric(t, "pulsar_proxy_tls_certificate_expiry_timestamp_seconds"); got != float64(renewed.Cert.NotAfter.Unix()) {
		t.Errorf("expiry gauge %v, want the renewed %v", got, renewed.Cert.NotAfter.Unix())
	}
}

// TestTLSRefusalsWithMutualTLS: the real binary with client certificates required. A
// certificate from a CA it does not trust and a TLS 1.1 client both fail the handshake, each
// counted; a client with a trusted certificate produces and consumes before and after.
func TestTLSRefusalsWithMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := certs.NewCA(t, dir, "ca")
	server := ca.Server(t, "proxy", time.Now().Add(time.Hour))
	good := ca.Client(t, "alice")
	stranger := certs.NewCA(t, t.TempDir(), "stranger").Client(t, "mallory")
	proxy := startProxy(t, brokerURLs(), fmt.Sprintf("tls:\n  certFile: %q\n  keyFile: %q\n  clientCAFile: %q\n  clientAuth: require\n",
		server.CertFile, server.KeyFile, ca.CertFile))

	c := newTLSClient(t, proxy.PulsarTLSURL, ca.CertFile, pulsar.NewAuthenticationTLS(good.CertFile, good.KeyFile)) // presents the certificate
	topic := uniqueTopic(t, "mtls")
	consumer := subscribe(t, c, topic, "s", pulsar.Exclusive)
	consumeAll(t, consumer, produce(t, c, topic, 100))

	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	strangerPair, err := tls.LoadX509KeyPair(stranger.CertFile, stranger.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	goodPair, err := tls.LoadX509KeyPair(good.CertFile, good.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	for i, cfg := range []*tls.Config{
		{RootCAs: roots, ServerName: "localhost", Certificates: []tls.Certificate{strangerPair}},
		{RootCAs: roots, ServerName: "localhost", Certificates: []tls.Certificate{goodPair}, MinVersion: tls.VersionTLS11, MaxVersion: tls.VersionTLS11},
	} {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", proxy.TLSAddr, cfg)
		if err == nil {
			// TLS 1.3: the client learns of a refused certificate on its first read.
			conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, err = conn.Read(make([]byte, 1))
			conn.Close()
		}
		if err == nil {
			t.Fatalf("refusal %d: the handshake succeeded", i)
		}
		// The proxy's TLS stack refused it with an alert; not a time-out or a dial failure.
		if !strings.Contains(err.Error(), "remote error: tls: ") {
			t.Fatalf("refusal %d: %v, want a TLS alert from the proxy", i, err)
		}
		t.Logf("refusal %d: %v", i, err)
		want := float64(i + 1)
		wait.Until(t, 10*time.Second, fmt.Sprintf("%v TLS handshake errors counted", want), func() bool {
			return proxy.count(t, "pulsar_proxy_tls_handshakes_total", `result="error"`) >= want
		})
	}
	consumeAll(t, consumer, produce(t, c, topic, 100))
}
