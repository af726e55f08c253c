package discovery

import (
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/certs"
)

// TestZooKeeperTLSDialer: the dialer verifies a server's certificate for the name dialled,
// presents the client certificate, and with skipHostname still refuses another CA.
func TestZooKeeperTLSDialer(t *testing.T) {
	dir := t.TempDir()
	ca := certs.NewCA(t, dir, "zk-ca")
	other := certs.NewCA(t, t.TempDir(), "other")
	server := ca.ServerFor(t, "zk", time.Now().Add(time.Hour), "zk-0.zk")
	client := ca.Client(t, "pulsar-proxy")
	cert, err := tls.LoadX509KeyPair(server.CertFile, server.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequestClientCert})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peers := make(chan int, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tc := c.(*tls.Conn)
			if tc.Handshake() == nil {
				peers <- len(tc.ConnectionState().PeerCertificates)
			}
			c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	dial := func(caFile string, skip bool, host string) error {
		cfg, err := ZooKeeperTLS(caFile, client.CertFile, client.KeyFile, skip)
		if err != nil {
			t.Fatal(err)
		}
		d := tlsDialer(cfg)
		// The certificate names zk-0.zk; dialling 127.0.0.1 checks that name against it.
		if host != "127.0.0.1" {
			cfg.ServerName = host
		}
		c, err := d("tcp", net.JoinHostPort("127.0.0.1", port), time.Second)
		if err == nil {
			c.Close()
		}
		return err
	}
	if err := dial(ca.CertFile, false, "zk-0.zk"); err != nil {
		t.Fatalf("the server's own name: %v", err)
	}
	if got := <-peers; got != 1 {
		t.Fatalf("client certificates presented: %d, want 1", got)
	}
	if err := dial(ca.CertFile, false, "127.0.0.1"); err == nil || !strings.Contains(err.Error(), "127.0.0.1") {
		t.Fatalf("a certificate without the dialled name: %v", err)
	}
	if err := dial(ca.CertFile, true, "127.0.0.1"); err != nil {
		t.Fatalf("skipHostname, trusted CA: %v", err)
	}
	if err := dial(other.CertFile, true, "127.0.0.1"); err == nil {
		t.Fatal("skipHostname accepted a certificate of another CA")
	}
	if _, err := ZooKeeperTLS(client.KeyFile, "", "", false); err == nil {
		t.Fatal("a CA file without a certificate accepted")
	}
}
