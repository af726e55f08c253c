package frame

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"testing"
	"time"
)

// A real ClientHello, as Go's TLS client writes it, is recognised; a Pulsar frame is not.
func TestIsTLSRecord(t *testing.T) {
	client, server := net.Pipe()
	defer server.Close()
	go func() {
		c := tls.Client(client, &tls.Config{ServerName: "proxy", MinVersion: tls.VersionTLS12})
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Handshake()
		c.Close()
	}()
	hello := make([]byte, 16)
	if _, err := io.ReadFull(server, hello); err != nil {
		t.Fatal(err)
	}
	if !IsTLSRecord(hello) {
		t.Errorf("a ClientHello (% x) is not recognised", hello[:6])
	}
	connect, err := AppendCommand(nil, Error(0, 0, "x"))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range [][]byte{connect, {0x16, 0x03}, {0x16, 0x04, 0x01}, {0x00, 0x00, 0x00, 0x10}, nil} {
		if IsTLSRecord(b) {
			t.Errorf("% x is taken for TLS", b)
		}
	}
}

// Peek shows the next bytes and leaves them to the next read.
func TestPeek(t *testing.T) {
	frame, err := AppendCommand(nil, Error(7, 0, "peeked"))
	if err != nil {
		t.Fatal(err)
	}
	r := NewReader(bytes.NewReader(frame), 0)
	head, err := r.Peek(3)
	if err != nil || !bytes.Equal(head, frame[:3]) {
		t.Fatalf("Peek = % x, %v", head, err)
	}
	cmd, err := r.ReadCommand()
	if err != nil || cmd.GetError().GetMessage() != "peeked" {
		t.Fatalf("ReadCommand after Peek = %v, %v", cmd, err)
	}
	if head, err := NewReader(bytes.NewReader([]byte{0x16}), 0).Peek(3); err != io.ErrUnexpectedEOF || len(head) != 1 {
		t.Fatalf("Peek of a short stream = % x, %v", head, err)
	}
}
