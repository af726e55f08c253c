package upstream

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/pires/go-proxyproto"
)

// Dialer opens the proxy's connections to brokers, for the control connections and for client
// sessions alike, so both reach a broker the same way: TCP, then TLS when configured, then a
// PROXY protocol header when configured. The header goes after the TLS handshake because a
// Pulsar broker decodes it from the decrypted stream (its proxy-protocol decoder sits behind
// the TLS handler) and before any Pulsar frame.
type Dialer struct {
	// Timeout bounds the TCP connect and the TLS handshake together.
	Timeout time.Duration
	// TLS, when set, is used for every broker; ServerName is set per dial to the broker's
	// host, so the certificate is checked against the name the proxy dialled (and SNI names
	// it).
	TLS *tls.Config
	// ProxyHeader is the PROXY protocol version sent to brokers (brokers with
	// haProxyProtocolEnabled): 0 sends none, 1 or 2 that version.
	ProxyHeader byte
}

// Origin is the client a broker connection is made for: its real address (a trusted PROXY
// header's, or the socket's) and the proxy address it connected to.
type Origin struct {
	Client net.Addr
	Proxy  net.Addr
}

// DialError says which step of reaching a broker failed.
type DialError struct {
	Addr string
	Step string // "connect", "tls" or "proxy header"
	Err  error
}

func (e *DialError) Error() string {
	if e.Step == "tls" {
		if fault := certificateFault(e.Err); fault != "" {
			return fmt.Sprintf("broker %s presented a certificate %s", e.Addr, fault)
		}
		return fmt.Sprintf("TLS handshake with broker %s failed: %v", e.Addr, e.Err)
	}
	return fmt.Sprintf("%s to broker %s failed: %v", e.Step, e.Addr, e.Err)
}

// certificateFault says what is wrong with a broker certificate that failed verification
// ("for another host: …", "the proxy does not trust: …"), or "" for any other error.
func certificateFault(err error) string {
	var hn x509.HostnameError
	var cv *tls.CertificateVerificationError
	switch {
	case errors.As(err, &hn):
		return "for another host: " + hn.Error()
	case errors.As(err, &cv):
		return "the proxy does not trust: " + cv.Err.Error()
	}
	return ""
}

func (e *DialError) Unwrap() error { return e.Err }

// CertificateRefused reports whether err is a broker certificate that failed verification
// (wrong host, untrusted issuer, expired): an operator's configuration problem worth a
// warning, unlike a broker that is merely down.
func CertificateRefused(err error) bool {
	var de *DialError
	return errors.As(err, &de) && de.Step == "tls" && certificateFault(de.Err) != ""
}

// Dial connects to the broker at addr (host:port). A nil from sends no PROXY header even
// when one is configured: the proxy's own control connections carry no client, and a broker's
// decoder takes connections without one.
func (d *Dialer) Dial(ctx context.Context, addr string, from *Origin) (net.Conn, error) {
	if d.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.Timeout)
		defer cancel()
	}
	var nd net.Dialer
	conn, err := nd.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, &DialError{Addr: addr, Step: "connect", Err: err}
	}
	if d.TLS != nil {
		host, _, _ := net.SplitHostPort(addr)
		cfg := d.TLS.Clone()
		cfg.ServerName = host
		tc := tls.Client(conn, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, &DialError{Addr: addr, Step: "tls", Err: err}
		}
		conn = tc
	}
	if d.ProxyHeader != 0 && from != nil && from.Client != nil && from.Proxy != nil {
		h := proxyproto.HeaderProxyFromAddrs(d.ProxyHeader, from.Client, sameFamily(from.Client, from.Proxy))
		if deadline, ok := ctx.Deadline(); ok {
			conn.SetWriteDeadline(deadline)
		}
		_, err := h.WriteTo(conn)
		conn.SetWriteDeadline(time.Time{})
		if err != nil {
			conn.Close()
			return nil, &DialError{Addr: addr, Step: "proxy header", Err: err}
		}
	}
	return conn, nil
}

// sameFamily returns dst in src's address family: a PROXY header carries one family for
// both addresses, and a client on IPv4 may reach a proxy listening on IPv6 (or the other
// way round). The destination is informational, so only its family is adjusted.
func sameFamily(src, dst net.Addr) net.Addr {
	s, ok1 := src.(*net.TCPAddr)
	d, ok2 := dst.(*net.TCPAddr)
	if !ok1 || !ok2 || (s.IP.To4() != nil) == (d.IP.To4() != nil) {
		return dst
	}
	if s.IP.To4() != nil {
		return &net.TCPAddr{IP: net.IPv4zero, Port: d.Port}
	}
	return &net.TCPAddr{IP: d.IP.To16(), Port: d.Port}
}
