package listener

import (
	"bytes"
	"context"
	"io"
	"net"
	"testing"
	"time"
)

// FuzzProxyHeader sends arbitrary first bytes from a trusted source: the reader never
// panics or hangs, and whatever it accepts, the bytes after the header reach the session
// unchanged, from a client address with an IP.
func FuzzProxyHeader(f *testing.F) {
	f.Add(append(v2Header(f, "203.0.113.7:41000"), "hello"...))
	f.Add([]byte("PROXY TCP4 203.0.113.7 192.0.2.1 41000 6650\r\nhello"))
	f.Add([]byte("PROXY UNKNOWN\r\nhello"))
	f.Add([]byte("\x00\x00\x00\x10\x00\x00\x00\x0c"))
	f.Add([]byte("PROXY TCP6 ::1 ::1 1 2\r\n"))
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	ln := Wrap(raw, proxyOpts("127.0.0.0/8", false, 500*time.Millisecond))
	f.Cleanup(func() { ln.Close() })
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := net.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write(data)
		c.(*net.TCPConn).CloseWrite()
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.(*Conn).HandshakeContext(ctx); err != nil {
			return
		}
		s.SetReadDeadline(time.Now().Add(5 * time.Second))
		rest, err := io.ReadAll(s)
		if err != nil {
			t.Fatalf("reading after the header: %v", err)
		}
		if !bytes.HasSuffix(data, rest) {
			t.Fatalf("after a header the session read %q, which does not end what was sent %q", rest, data)
		}
		if a, ok := s.RemoteAddr().(*net.TCPAddr); !ok || a.IP == nil {
			t.Fatalf("client address %v", s.RemoteAddr())
		}
	})
}
