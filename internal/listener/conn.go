package listener

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"github.com/pires/go-proxyproto"
)

// ProxyOptions configures PROXY protocol (v1 and v2) on a client listener.
type ProxyOptions struct {
	Enabled       bool
	TrustedCIDRs  []netip.Prefix // only these sources may send a header
	RequireHeader bool           // a trusted source without a header is refused
	HeaderTimeout time.Duration  // for the whole header; 0 = 5s
}

// Options wraps a listener; a zero Options (no TLS, no PROXY) leaves it as it is.
type Options struct {
	TLS     *tls.Config // nil = plaintext
	Proxy   ProxyOptions
	Metrics *Metrics // counts TLS handshakes; nil = not counted
}

// Wrap returns ln unchanged when there is nothing to prepare (so plain TCP conns keep
// their splice path), otherwise a listener whose conns are *Conn.
func Wrap(ln net.Listener, o Options) net.Listener {
	if o.TLS == nil && !o.Proxy.Enabled {
		return ln
	}
	if o.Proxy.HeaderTimeout <= 0 {
		o.Proxy.HeaderTimeout = 5 * time.Second
	}
	return &wrapped{Listener: ln, o: o}
}

// WrapConn prepares one accepted connection as Wrap's listener would: for a plane that
// accepts from the bare listener because it keeps the socket itself (the SNI plane reads the
// PROXY header and the ClientHello through the Conn, then relays the socket).
func WrapConn(c net.Conn, o Options) *Conn {
	if o.Proxy.HeaderTimeout <= 0 {
		o.Proxy.HeaderTimeout = 5 * time.Second
	}
	return &Conn{Conn: c, raw: c, o: &o, remote: c.RemoteAddr()}
}

type wrapped struct {
	net.Listener
	o Options
}

// Accept does no I/O on the new connection: that waits for HandshakeContext.
func (w *wrapped) Accept() (net.Conn, error) {
	c, err := w.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &Conn{Conn: c, raw: c, o: &w.o, remote: c.RemoteAddr()}, nil
}

// Errors of HandshakeContext; the session logs them.
var (
	errUntrustedHeader = errors.New("PROXY protocol header from an untrusted address")
	errMissingHeader   = errors.New("no PROXY protocol header from a trusted address that must send one")
	errHeaderTimeout   = errors.New("PROXY protocol header not complete in time")
)

// Conn is a client connection that needs HandshakeContext before use. Before that, it
// reads and writes the bare connection.
type Conn struct {
	net.Conn          // what Read/Write go through: raw, a header-aware reader, or TLS
	raw      net.Conn // the accepted connection
	o        *Options
	remote   net.Addr
	tls      *tls.Conn
}

// RemoteAddr is the client's address: the one in a trusted PROXY header if there was one.
func (c *Conn) RemoteAddr() net.Addr { return c.remote }

// TLS reports the TLS state; ok is false on a plaintext connection.
func (c *Conn) TLS() (tls.ConnectionState, bool) {
	if c.tls == nil {
		return tls.ConnectionState{}, false
	}
	return c.tls.ConnectionState(), true
}

// TCPConn is the accepted socket when nothing sits between it and the session (no TLS and
// no read-ahead left over from the PROXY header), so forwarding can splice on it.
func (c *Conn) TCPConn() (*net.TCPConn, bool) {
	tc, ok := c.Conn.(*net.TCPConn)
	return tc, ok
}

// HandshakeContext reads the PROXY header (if enabled) and then does the TLS handshake
// (if configured), each bounded by ctx and the header by HeaderTimeout.
func (c *Conn) HandshakeContext(ctx context.Context) error {
	if c.o.Proxy.Enabled {
		if err := c.readProxyHeader(); err != nil {
			return err
		}
	}
	if c.o.TLS == nil {
		return nil
	}
	c.tls = tls.Server(c.Conn, c.o.TLS)
	c.Conn = c.tls
	err := c.tls.HandshakeContext(ctx)
	if m := c.o.Metrics; m != nil {
		result := "ok"
		var ne net.Error
		switch {
		case err == nil:
		case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
			result = "timeout"
		default:
			result = "error"
		}
		m.handshakes.WithLabelValues(result).Inc()
	}
	return err
}

func (c *Conn) trusted() bool {
	ap, err := netip.ParseAddrPort(c.raw.RemoteAddr().String())
	if err != nil {
		return false
	}
	a := ap.Addr().Unmap()
	for _, p := range c.o.Proxy.TrustedCIDRs {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// oneByte hands bufio one byte per read, so the v2 parser never reads past the header
// and, when a header was all there was, the socket itself can be used afterwards. The v1
// parser insists on finding its whole line in one read, so for v1 it reads normally.
type oneByte struct {
	r     io.Reader
	whole bool
}

func (o *oneByte) Read(p []byte) (int, error) {
	if len(p) > 1 && !o.whole {
		p = p[:1]
	}
	return o.r.Read(p)
}

func (c *Conn) readProxyHeader() error {
	deadline := time.Now().Add(c.o.Proxy.HeaderTimeout)
	c.raw.SetReadDeadline(deadline)
	defer c.raw.SetReadDeadline(time.Time{})
	// 256 as in go-proxyproto: its v2 parser peeks the whole address block.
	src := &oneByte{r: c.raw}
	br := bufio.NewReaderSize(src, 256)
	if b, err := br.Peek(1); err == nil && b[0] == 'P' {
		src.whole = true // maybe "PROXY ": v1
	}
	h, err := proxyproto.Read(br)
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout(), err != nil && !time.Now().Before(deadline):
		// The parser does not always wrap the read error, hence the deadline check.
		return errHeaderTimeout
	case errors.Is(err, proxyproto.ErrNoProxyProtocol):
		if c.o.Proxy.RequireHeader && c.trusted() {
			return errMissingHeader
		}
	case err != nil:
		return fmt.Errorf("PROXY protocol header: %w", err)
	default:
		if !c.trusted() {
			return errUntrustedHeader
		}
		if h.Command.IsProxy() && h.SourceAddr != nil {
			c.remote = h.SourceAddr
		}
	}
	if br.Buffered() > 0 {
		// Bytes peeked while looking for a header belong to the client's first frame.
		c.Conn = &prefixed{Conn: c.raw, r: io.MultiReader(br, c.raw)}
	}
	return nil
}

// prefixed reads bytes already taken from the socket before the socket itself.
type prefixed struct {
	net.Conn
	r io.Reader
}

func (p *prefixed) Read(b []byte) (int, error) { return p.r.Read(b) }

// Close closes the socket itself: safe from any goroutine at any stage of the handshake.
func (c *Conn) Close() error { return c.raw.Close() }

// CloseWrite half-closes (TLS close_notify or TCP FIN) so the peer sees the end of the stream.
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.raw.Close()
}
