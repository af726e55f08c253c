package sni

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// FuzzReadHello feeds any bytes, in two reads split anywhere, to the reader. It must not
// panic; what it returns to replay is exactly a prefix of what came; and when it reads a
// name, Go's own TLS server (crypto/tls, which reports the name to GetConfigForClient) must
// read the same one from the same bytes, or refuse the hello: the proxy routes by the name a
// TLS stack would act on, never by another. Seeds: testdata/fuzz/FuzzReadHello.
func FuzzReadHello(f *testing.F) {
	for _, cfg := range []*tls.Config{
		{ServerName: "broker-1.pulsar.svc"},
		{ServerName: "b.svc", MaxVersion: tls.VersionTLS12},
		{ServerName: "b.svc", EncryptedClientHelloConfigList: echConfigList(f, "pub.svc"), MinVersion: tls.VersionTLS13},
	} {
		f.Add(capture(f, cfg), uint16(7))
	}
	f.Add(hello(0x0303, sniExt("b.svc"), sniExt("c.svc")), uint16(0))
	f.Add(resplit(hello(0x0303, sniExt("a.b")), 3), uint16(20))
	f.Fuzz(func(t *testing.T, data []byte, split uint16) {
		at := min(int(split), len(data))
		r := io.MultiReader(bytes.NewReader(data[:at]), bytes.NewReader(data[at:]))
		h, raw, err := ReadHello(r, 4<<10)
		if !bytes.HasPrefix(data, raw) {
			t.Fatalf("replay bytes are not a prefix of the input")
		}
		if err != nil || h.ServerName == "" {
			return
		}
		if goName, ok := goServerName(data); ok && goName != h.ServerName {
			t.Fatalf("read server name %q, crypto/tls reads %q", h.ServerName, goName)
		}
	})
}

// goServerName is the server name crypto/tls's server reads from data, and whether it got as
// far as reading one.
func goServerName(data []byte) (string, bool) {
	client, server := net.Pipe()
	defer client.Close()
	go func() {
		client.SetDeadline(time.Now().Add(time.Second))
		client.Write(data)
		io.Copy(io.Discard, client) // the server's alert
	}()
	var name string
	var seen bool
	cfg := &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		name, seen = h.ServerName, true
		return nil, errors.New("enough")
	}}
	server.SetDeadline(time.Now().Add(time.Second))
	err := tls.Server(server, cfg).Handshake()
	server.Close()
	if !seen || err == nil || !strings.Contains(err.Error(), "enough") {
		return "", false
	}
	return name, true
}
