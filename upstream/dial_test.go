package upstream

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/pires/go-proxyproto"
	"github.com/rs/zerolog"

	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/certs"
)

// tlsBroker is a TLS listener presenting cert; for each connection it hands seen the PROXY
// header the decrypted stream starts with (nil when it starts with anything else).
func tlsBroker(t *testing.T, cert certs.Pair, seen chan<- *proxyproto.Header) string {
	t.Helper()
	return tlsBrokerSNI(t, cert, seen, nil)
}

// tlsBrokerSNI is tlsBroker that also hands sni the server name of each ClientHello.
func tlsBrokerSNI(t *testing.T, cert certs.Pair, seen chan<- *proxyproto.Header, sni chan<- string) string {
	t.Helper()
	kp, err := tls.LoadX509KeyPair(cert.CertFile, cert.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{kp}}
	if sni != nil {
		cfg.GetConfigForClient = func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			sni <- h.ServerName
			return nil, nil
		}
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				h, _ := proxyproto.Read(bufio.NewReader(c)) // nil when the stream starts otherwise
				if seen != nil {
					seen <- h
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func brokerTLS(t *testing.T, o TLSOptions) *tls.Config {
	t.Helper()
	c, err := NewTLSConfig(o, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The broker's certificate names 127.0.0.1 only: dialled as 127.0.0.1 it is accepted, as
// localhost it is refused with an error that says so, unless hostname verification is
// turned off; a certificate from a CA the proxy does not trust is refused either way.
func TestDialerVerifiesBrokerCertificate(t *testing.T) {
	dir := t.TempDir()
	ca := certs.NewCA(t, dir, "ca")
	sni := make(chan string, 4)
	addr := tlsBrokerSNI(t, ca.ServerFor(t, "broker", time.Now().Add(time.Hour), "127.0.0.1"), nil, sni)
	_, port, _ := net.SplitHostPort(addr)
	verifying := &Dialer{Timeout: 5 * time.Second, TLS: brokerTLS(t, TLSOptions{TrustCertsFile: ca.CertFile})}

	c, err := verifying.Dial(context.Background(), addr, nil)
	if err != nil {
		t.Fatalf("broker with a matching certificate: %v", err)
	}
	c.Close()
	if name := <-sni; name != "" {
		t.Fatalf("SNI %q for an IP address, want none", name)
	}

	_, err = verifying.Dial(context.Background(), "localhost:"+port, nil)
	if !CertificateRefused(err) || !strings.Contains(err.Error(), "certificate for another host") {
		t.Fatalf("certificate for 127.0.0.1 dialled as localhost: err = %v, want a refused certificate", err)
	}
	if name := <-sni; name != "localhost" {
		t.Fatalf("SNI %q, want the dialled host name", name)
	}

	lax := &Dialer{Timeout: 5 * time.Second, TLS: brokerTLS(t, TLSOptions{TrustCertsFile: ca.CertFile, SkipHostnameVerification: true})}
	c, err = lax.Dial(context.Background(), "localhost:"+port, nil)
	if err != nil {
		t.Fatalf("hostname verification off: %v", err)
	}
	c.Close()

	other := certs.NewCA(t, t.TempDir(), "other")
	strangerAddr := tlsBroker(t, other.Server(t, "stranger", time.Now().Add(time.Hour)), nil)
	for _, d := range []*Dialer{verifying, lax} {
		_, err := d.Dial(context.Background(), strangerAddr, nil)
		if !CertificateRefused(err) || !strings.Contains(err.Error(), "does not trust") {
			t.Fatalf("certificate from an unknown CA: err = %v", err)
		}
	}
}

// The PROXY header is the first thing in the TLS stream (where a broker's decoder looks),
// carries the client's address, and is sent only for connections made for a client.
func TestDialerSendsProxyHeaderInsideTLS(t *testing.T) {
	dir := t.TempDir()
	ca := certs.NewCA(t, dir, "ca")
	seen := make(chan *proxyproto.Header, 2)
	addr := tlsBroker(t, ca.Server(t, "broker", time.Now().Add(time.Hour)), seen)
	d := &Dialer{Timeout: 5 * time.Second, ProxyHeader: 2, TLS: brokerTLS(t, TLSOptions{TrustCertsFile: ca.CertFile})}
	client := net.TCPAddrFromAddrPort(netip.MustParseAddrPort("203.0.113.7:41000"))
	proxy := net.TCPAddrFromAddrPort(netip.MustParseAddrPort("[::1]:6650")) // another family: adjusted

	c, err := d.Dial(context.Background(), addr, &Origin{Client: client, Proxy: proxy})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h := <-seen
	if h == nil || h.Version != 2 || h.SourceAddr.String() != "203.0.113.7:41000" {
		t.Fatalf("broker read header %+v, want v2 from 203.0.113.7:41000", h)
	}

	c2, err := d.Dial(context.Background(), addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	c2.Write([]byte{0, 0, 0, 0}) // a frame's start, not a header
	if h := <-seen; h != nil {
		t.Fatalf("connection without a client sent header %+v", h)
	}
}

// A broker that requires a client certificate (tlsRequireTrustedClientCertOnConnect) gets
// the proxy's broker.tls.certFile.
func TestDialerPresentsClientCertificate(t *testing.T) {
	dir := t.TempDir()
	ca := certs.NewCA(t, dir, "ca")
	server := ca.Server(t, "broker", time.Now().Add(time.Hour))
	kp, err := tls.LoadX509KeyPair(server.CertFile, server.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	clientCAs := x509.NewCertPool()
	clientCAs.AddCert(ca.Cert)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{kp},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clientCAs})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peers := make(chan string, 2)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tc := c.(*tls.Conn)
			tc.SetDeadline(time.Now().Add(5 * time.Second))
			if tc.Handshake() == nil {
				peers <- tc.ConnectionState().PeerCertificates[0].Subject.CommonName
			} else {
				peers <- ""
			}
			tc.Close()
		}
	}()

	proxyCert := ca.Client(t, "proxy")
	with := &Dialer{Timeout: 5 * time.Second, TLS: brokerTLS(t, TLSOptions{
		TrustCertsFile: ca.CertFile, CertFile: proxyCert.CertFile, KeyFile: proxyCert.KeyFile})}
	c, err := with.Dial(context.Background(), ln.Addr().String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if cn := <-peers; cn != "proxy" {
		t.Fatalf("broker saw client certificate %q, want the proxy's", cn)
	}

	without := &Dialer{Timeout: 5 * time.Second, TLS: brokerTLS(t, TLSOptions{TrustCertsFile: ca.CertFile})}
	if c, err := without.Dial(context.Background(), ln.Addr().String(), nil); err == nil {
		// TLS 1.3: the refusal arrives after the client's side of the handshake.
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 1))
		c.Close()
		if err == nil {
			t.Fatal("a broker requiring a client certificate accepted none")
		}
	}
	if cn := <-peers; cn != "" {
		t.Fatalf("broker accepted %q without a client certificate", cn)
	}
}
