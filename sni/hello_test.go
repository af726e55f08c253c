package sni

import (
	"bytes"
	"crypto/ecdh"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"testing/iotest"

	"golang.org/x/crypto/cryptobyte"
)

// capture is the first flight of a real TLS client (Go's crypto/tls) with cfg: its
// ClientHello records, as they came off the wire.
func capture(t testing.TB, cfg *tls.Config) []byte {
	t.Helper()
	client, server := net.Pipe()
	go func() {
		tls.Client(client, cfg).Handshake()
		client.Close()
	}()
	defer server.Close()
	_, raw, err := ReadHello(server, 1<<16)
	if err != nil {
		t.Fatalf("reading a real ClientHello: %v", err)
	}
	return raw
}

func TestReadHelloRealClients(t *testing.T) {
	for _, tc := range []struct {
		what  string
		cfg   *tls.Config
		name  string
		tls13 bool
	}{
		{"TLS 1.3", &tls.Config{ServerName: "broker-1.pulsar.svc", MinVersion: tls.VersionTLS13}, "broker-1.pulsar.svc", true},
		{"TLS 1.2 only", &tls.Config{ServerName: "broker-1.pulsar.svc", MaxVersion: tls.VersionTLS12}, "broker-1.pulsar.svc", false},
		{"TLS 1.2 or 1.3", &tls.Config{ServerName: "Broker-1.Pulsar.SVC"}, "Broker-1.Pulsar.SVC", true},
		{"no SNI (an IP is never sent)", &tls.Config{ServerName: "10.0.0.1", InsecureSkipVerify: true}, "", true},
	} {
		raw := capture(t, tc.cfg)
		h, got, err := ReadHello(bytes.NewReader(raw), 16<<10)
		if err != nil {
			t.Fatalf("%s: %v", tc.what, err)
		}
		if h.ServerName != tc.name || h.TLS13 != tc.tls13 || h.Version != tls.VersionTLS12 || h.ECH {
			t.Errorf("%s: read %+v, want name %q TLS13 %v", tc.what, h, tc.name, tc.tls13)
		}
		if !bytes.Equal(got, raw) {
			t.Errorf("%s: the bytes to replay differ from those read", tc.what)
		}
	}
}

// A hello arriving a byte at a time (many TCP segments), or split over many TLS records, is
// put back together; every byte read is kept for the broker.
func TestReadHelloSpreadOut(t *testing.T) {
	raw := capture(t, &tls.Config{ServerName: "broker-0.pulsar.svc"})
	h, got, err := ReadHello(iotest.OneByteReader(bytes.NewReader(raw)), 16<<10)
	if err != nil || h.ServerName != "broker-0.pulsar.svc" || !bytes.Equal(got, raw) {
		t.Fatalf("one byte per read: %+v %v", h, err)
	}
	for _, size := range []int{1, 7, 100} {
		split := resplit(raw, size)
		h, got, err := ReadHello(iotest.HalfReader(bytes.NewReader(split)), 16<<10)
		if err != nil || h.ServerName != "broker-0.pulsar.svc" || h.Records < 2 || !bytes.Equal(got, split) {
			t.Fatalf("records of %d bytes: %+v %v", size, h, err)
		}
	}
	// Early data after the hello is kept, to be replayed with it.
	withEarly := append(append([]byte(nil), raw...), 23, 3, 3, 0, 1, 'x')
	if _, got, err := ReadHello(bytes.NewReader(withEarly), 16<<10); err != nil || !bytes.HasPrefix(withEarly, got) || len(got) < len(raw) {
		t.Fatalf("hello with bytes after it: %v", err)
	}
}

// resplit carries the handshake message of one record over records of at most size bytes.
func resplit(raw []byte, size int) []byte {
	msg := raw[5 : 5+(int(raw[3])<<8|int(raw[4]))]
	var out []byte
	for len(msg) > 0 {
		n := min(size, len(msg))
		out = append(out, 22, 3, 1, byte(n>>8), byte(n))
		out = append(out, msg[:n]...)
		msg = msg[n:]
	}
	return out
}

func TestReadHelloOutcomes(t *testing.T) {
	raw := capture(t, &tls.Config{ServerName: "broker-0.pulsar.svc"})
	pulsarConnect := []byte{0, 0, 0, 20, 0, 0, 0, 16, 8, 2, 18, 12}
	for _, tc := range []struct {
		what  string
		input []byte
		max   int
		want  error
	}{
		{"nothing at all", nil, 16 << 10, io.EOF},
		{"half a record header", raw[:3], 16 << 10, io.ErrUnexpectedEOF},
		{"half a hello", raw[:len(raw)/2], 16 << 10, io.ErrUnexpectedEOF},
		{"a plaintext Pulsar CONNECT", pulsarConnect, 16 << 10, ErrNotTLS},
		{"an HTTP request", []byte("GET / HTTP/1.1\r\n\r\n"), 16 << 10, ErrNotTLS},
		{"an SSLv2-style hello", []byte{0x80, 0x2e, 0x01, 0x03, 0x01}, 16 << 10, ErrNotTLS},
		{"over the limit", raw, 64, ErrTooLarge},
		{"a record over 16 KiB", []byte{22, 3, 1, 0x40, 0x01}, 64 << 10, ErrMalformed},
		{"an empty record", []byte{22, 3, 1, 0, 0}, 16 << 10, ErrMalformed},
		{"a ServerHello", []byte{22, 3, 3, 0, 4, 2, 0, 0, 0}, 16 << 10, ErrMalformed},
		{"an alert after a partial hello", append(resplit(raw, 10)[:15], 21, 3, 3, 0, 2, 2, 40), 16 << 10, ErrMalformed},
		{"a huge hello's length", []byte{22, 3, 1, 0, 4, 1, 0xff, 0xff, 0xff}, 16 << 10, ErrTooLarge},
		{"tiny records past twice the limit", resplit(raw, 1), 200, ErrTooLarge},
	} {
		if _, _, err := ReadHello(bytes.NewReader(tc.input), tc.max); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.what, err, tc.want)
		}
	}
}

// hello builds a ClientHello record with the given extensions (type, body) and legacy version.
func hello(version uint16, exts ...[]byte) []byte {
	var b cryptobyte.Builder
	b.AddUint8(typeClientHello)
	b.AddUint24LengthPrefixed(func(b *cryptobyte.Builder) {
		b.AddUint16(version)
		b.AddBytes(make([]byte, 32))
		b.AddUint8(0)
		b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddUint16(0x1301) })
		b.AddUint8LengthPrefixed(func(b *cryptobyte.Builder) { b.AddUint8(0) })
		if exts == nil {
			return
		}
		b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
			for _, e := range exts {
				b.AddBytes(e)
			}
		})
	})
	msg := b.BytesOrPanic()
	return append([]byte{22, 3, 1, byte(len(msg) >> 8), byte(len(msg))}, msg...)
}

func ext(typ uint16, body func(*cryptobyte.Builder)) []byte {
	var b cryptobyte.Builder
	b.AddUint16(typ)
	b.AddUint16LengthPrefixed(body)
	return b.BytesOrPanic()
}

func sniExt(names ...string) []byte {
	return ext(extServerName, func(b *cryptobyte.Builder) {
		b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
			for _, n := range names {
				b.AddUint8(hostNameType)
				b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes([]byte(n)) })
			}
		})
	})
}

// Hellos no mainstream client sends, each with its defined outcome: a second name in any
// form is refused, so the proxy and the broker cannot disagree on which one counts.
func TestReadHelloCraftedExtensions(t *testing.T) {
	other := ext(21, func(b *cryptobyte.Builder) { b.AddBytes(make([]byte, 3)) })
	for _, tc := range []struct {
		what  string
		input []byte
		name  string
		want  error
	}{
		{"TLS 1.2 without extensions", hello(0x0303), "", nil},
		{"one name among other extensions", hello(0x0303, other, sniExt("b.svc"), other), "b.svc", nil},
		{"two server_name extensions", hello(0x0303, sniExt("b.svc"), sniExt("evil.svc")), "", ErrMalformed},
		{"two host names in one", hello(0x0303, sniExt("b.svc", "evil.svc")), "", ErrMalformed},
		{"an empty host name", hello(0x0303, sniExt("")), "", ErrMalformed},
		{"an empty name list", hello(0x0303, ext(extServerName, func(b *cryptobyte.Builder) { b.AddUint16(0) })), "", ErrMalformed},
		{"SSL 3.0", hello(0x0300, sniExt("b.svc")), "", ErrMalformed},
		{"two ECH extensions", hello(0x0303, ext(extECH, func(*cryptobyte.Builder) {}), ext(extECH, func(*cryptobyte.Builder) {})), "", ErrMalformed},
		{"a truncated extension", hello(0x0303, sniExt("b.svc")[:6]), "", ErrMalformed},
	} {
		h, _, err := ReadHello(bytes.NewReader(tc.input), 16<<10)
		if !errors.Is(err, tc.want) || err == nil && h.ServerName != tc.name {
			t.Errorf("%s: %+v %v, want name %q error %v", tc.what, h, err, tc.name, tc.want)
		}
	}
}

// ECH: the reader sees the outer hello only; its name is the public one, which is what the
// plane routes by. The inner hello stays encrypted.
func TestReadHelloECHOuter(t *testing.T) {
	configList := echConfigList(t, "public.pulsar.svc")
	raw := capture(t, &tls.Config{ServerName: "broker-7.secret.svc", EncryptedClientHelloConfigList: configList, MinVersion: tls.VersionTLS13})
	h, _, err := ReadHello(bytes.NewReader(raw), 16<<10)
	if err != nil || !h.ECH || h.ServerName != "public.pulsar.svc" {
		t.Fatalf("ECH hello: %+v %v, want the outer name public.pulsar.svc", h, err)
	}
	if strings.Contains(string(raw), "broker-7.secret.svc") {
		t.Fatal("the inner name is visible in the hello")
	}
}

// echConfigList is an ECH configuration list (draft-ietf-tls-esni-22 4) for one X25519
// key, whose public name is publicName; echKey returns the key with it.
func echConfigList(t testing.TB, publicName string) []byte {
	list, _ := echKey(t, publicName)
	return list
}

func echKey(t testing.TB, publicName string) ([]byte, tls.EncryptedClientHelloKey) {
	t.Helper()
	key, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var c cryptobyte.Builder
	c.AddUint16(extECH)
	c.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
		b.AddUint8(7)     // config_id
		b.AddUint16(0x20) // KEM: DHKEM(X25519, HKDF-SHA256)
		b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(key.PublicKey().Bytes()) })
		b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
			b.AddUint16(1) // HKDF-SHA256
			b.AddUint16(1) // AES-128-GCM
		})
		b.AddUint8(32) // maximum_name_length
		b.AddUint8LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes([]byte(publicName)) })
		b.AddUint16(0) // no extensions
	})
	config := c.BytesOrPanic()
	var l cryptobyte.Builder
	l.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(config) })
	return l.BytesOrPanic(), tls.EncryptedClientHelloKey{Config: config, PrivateKey: key.Bytes(), SendAsRetry: true}
}
