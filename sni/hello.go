package sni

import (
	"errors"
	"fmt"
	"io"

	"golang.org/x/crypto/cryptobyte"
)

// TLS wire values the reader needs (RFC 8446, RFC 6066, the ECH draft).
const (
	recordHandshake  = 22
	recordHeaderSize = 5
	maxRecordPayload = 1 << 14 // a plaintext record's limit (RFC 8446 5.1)
	typeClientHello  = 1
	extServerName    = 0
	extSupportedVers = 43
	extECH           = 0xfe0d
	hostNameType     = 0
	versionTLS13     = 0x0304
)

// Reasons the reader gives up, each a defined outcome of the SNI plane (see Outcome).
var (
	// ErrNotTLS: the first bytes are not a TLS handshake record (a plaintext Pulsar client,
	// HTTP, an SSLv2-style hello).
	ErrNotTLS = errors.New("not a TLS handshake")
	// ErrMalformed: a TLS record or ClientHello that breaks the protocol's rules, among them
	// a second server_name extension or host name, which two parsers could read differently.
	ErrMalformed = errors.New("malformed ClientHello")
	// ErrTooLarge: the ClientHello (or the records carrying it) is over the reader's limit.
	ErrTooLarge = errors.New("ClientHello over the size limit")
)

// Hello is what the plane reads of a ClientHello: enough to route it, and to say in a log line
// what kind of client it was. Nothing in it is trusted beyond routing: the TLS session itself
// is between the client and the broker.
type Hello struct {
	ServerName string // the host_name of server_name as sent; "" without one
	Version    uint16 // legacy_version (0x0303 for TLS 1.2 and 1.3 alike)
	TLS13      bool   // supported_versions offers TLS 1.3
	ECH        bool   // an encrypted_client_hello extension: the name is the outer (public) one
	Size       int    // bytes of the handshake message
	Records    int    // TLS records it came in
}

// helloReader reads a ClientHello from a stream, keeping every byte read (raw) so they can be
// replayed to the broker unchanged: the records carrying the hello, and whatever followed
// them in the same reads (TLS 1.3 early data).
type helloReader struct {
	r      io.Reader
	max    int    // the largest ClientHello accepted
	raw    []byte // every byte read so far
	next   int    // start of the next record in raw
	msg    []byte // the handshake message, reassembled from the records' payloads
	record int
}

// ReadHello reads one ClientHello of at most max bytes from r and returns it with every byte
// it read (to be sent on first). A hello may come in any number of TCP segments and TLS
// records; the records carrying it may take at most twice max bytes in all (headers of tiny
// records included).
func ReadHello(r io.Reader, max int) (Hello, []byte, error) {
	hr := &helloReader{r: r, max: max, raw: make([]byte, 0, min(max, 2048))}
	h, err := hr.read()
	return h, hr.raw, err
}

func (hr *helloReader) read() (Hello, error) {
	for {
		if err := hr.fill(hr.next + recordHeaderSize); err != nil {
			return Hello{}, err
		}
		hdr := hr.raw[hr.next : hr.next+recordHeaderSize]
		if err := hr.checkHeader(hdr); err != nil {
			return Hello{}, err
		}
		n := int(hdr[3])<<8 | int(hdr[4])
		end := hr.next + recordHeaderSize + n
		if err := hr.fill(end); err != nil {
			return Hello{}, err
		}
		hr.msg = append(hr.msg, hr.raw[hr.next+recordHeaderSize:end]...)
		hr.next = end
		hr.record++
		if done, h, err := hr.message(); done || err != nil {
			h.Records = hr.record
			return h, err
		}
	}
}

// checkHeader accepts a handshake record header of a plausible TLS version and length.
func (hr *helloReader) checkHeader(hdr []byte) error {
	switch {
	case hdr[0] != recordHandshake || hdr[1] != 3:
		if hr.record == 0 {
			return ErrNotTLS
		}
		return fmt.Errorf("%w: a record of type %d before the ClientHello is complete", ErrMalformed, hdr[0])
	case int(hdr[3])<<8|int(hdr[4]) == 0:
		return fmt.Errorf("%w: an empty handshake record", ErrMalformed)
	case int(hdr[3])<<8|int(hdr[4]) > maxRecordPayload:
		return fmt.Errorf("%w: a record of %d bytes (the limit is %d)", ErrMalformed, int(hdr[3])<<8|int(hdr[4]), maxRecordPayload)
	}
	return nil
}

// message parses the handshake message once the records have brought all of it.
func (hr *helloReader) message() (bool, Hello, error) {
	if len(hr.msg) < 4 {
		return false, Hello{}, nil
	}
	if hr.msg[0] != typeClientHello {
		return true, Hello{}, fmt.Errorf("%w: the first handshake message is of type %d", ErrMalformed, hr.msg[0])
	}
	n := int(hr.msg[1])<<16 | int(hr.msg[2])<<8 | int(hr.msg[3])
	if n > hr.max {
		return true, Hello{}, fmt.Errorf("%w: %d bytes (the limit is %d)", ErrTooLarge, n, hr.max)
	}
	if len(hr.msg) < 4+n {
		return false, Hello{}, nil
	}
	h, err := parseClientHello(hr.msg[4 : 4+n])
	h.Size = n
	return true, h, err
}

// fill reads until raw holds n bytes; a read may bring more.
func (hr *helloReader) fill(n int) error {
	if n > 2*hr.max+recordHeaderSize {
		return fmt.Errorf("%w: its records take more than %d bytes", ErrTooLarge, 2*hr.max)
	}
	for len(hr.raw) < n {
		if cap(hr.raw) < n {
			grown := make([]byte, len(hr.raw), min(max(2*cap(hr.raw), n), 2*hr.max+recordHeaderSize))
			copy(grown, hr.raw)
			hr.raw = grown
		}
		k, err := hr.r.Read(hr.raw[len(hr.raw):cap(hr.raw)])
		hr.raw = hr.raw[:len(hr.raw)+k]
		if err != nil && len(hr.raw) < n {
			if errors.Is(err, io.EOF) && len(hr.raw) > 0 {
				return io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

// parseClientHello reads the body of a ClientHello (RFC 8446 4.1.2; RFC 5246 7.4.1.2 for
// TLS 1.2, whose extensions may be absent).
func parseClientHello(body []byte) (Hello, error) {
	s := cryptobyte.String(body)
	var h Hello
	var random []byte
	var sessionID, suites, compression cryptobyte.String
	if !s.ReadUint16(&h.Version) || !s.ReadBytes(&random, 32) ||
		!s.ReadUint8LengthPrefixed(&sessionID) || len(sessionID) > 32 ||
		!s.ReadUint16LengthPrefixed(&suites) || len(suites) < 2 || len(suites)%2 != 0 ||
		!s.ReadUint8LengthPrefixed(&compression) || len(compression) < 1 {
		return h, fmt.Errorf("%w: its fixed fields do not parse", ErrMalformed)
	}
	if h.Version < 0x0301 {
		return h, fmt.Errorf("%w: legacy_version %#04x is older than TLS 1.0", ErrMalformed, h.Version)
	}
	if s.Empty() {
		return h, nil
	}
	var exts cryptobyte.String
	if !s.ReadUint16LengthPrefixed(&exts) || !s.Empty() {
		return h, fmt.Errorf("%w: its extensions do not parse", ErrMalformed)
	}
	return h, parseExtensions(&h, exts)
}

// parseExtensions reads the extensions the plane acts on; a second copy of any of them is
// refused (RFC 8446 4.2 forbids duplicates), so the proxy and the broker cannot read two
// different names out of one hello.
func parseExtensions(h *Hello, exts cryptobyte.String) error {
	var seenName, seenVersions bool
	for !exts.Empty() {
		var typ uint16
		var data cryptobyte.String
		if !exts.ReadUint16(&typ) || !exts.ReadUint16LengthPrefixed(&data) {
			return fmt.Errorf("%w: an extension does not parse", ErrMalformed)
		}
		var err error
		switch typ {
		case extServerName:
			if seenName {
				return fmt.Errorf("%w: two server_name extensions", ErrMalformed)
			}
			seenName = true
			h.ServerName, err = parseServerName(data)
		case extSupportedVers:
			if seenVersions {
				return fmt.Errorf("%w: two supported_versions extensions", ErrMalformed)
			}
			seenVersions = true
			h.TLS13, err = offersTLS13(data)
		case extECH:
			if h.ECH {
				return fmt.Errorf("%w: two encrypted_client_hello extensions", ErrMalformed)
			}
			h.ECH = true
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// parseServerName reads a ServerNameList (RFC 6066 3): exactly one host_name, non-empty; name
// types other than host_name (none is defined) are skipped, as TLS stacks do.
func parseServerName(data cryptobyte.String) (string, error) {
	var list cryptobyte.String
	if !data.ReadUint16LengthPrefixed(&list) || !data.Empty() || list.Empty() {
		return "", fmt.Errorf("%w: server_name does not parse", ErrMalformed)
	}
	var name string
	for !list.Empty() {
		var typ uint8
		var v cryptobyte.String
		if !list.ReadUint8(&typ) || !list.ReadUint16LengthPrefixed(&v) {
			return "", fmt.Errorf("%w: server_name does not parse", ErrMalformed)
		}
		if typ != hostNameType {
			continue
		}
		if name != "" || len(v) == 0 {
			return "", fmt.Errorf("%w: server_name holds an empty or a second host_name", ErrMalformed)
		}
		name = string(v)
	}
	return name, nil
}

// offersTLS13 reads supported_versions (RFC 8446 4.2.1).
func offersTLS13(data cryptobyte.String) (bool, error) {
	var list cryptobyte.String
	if !data.ReadUint8LengthPrefixed(&list) || !data.Empty() || len(list) < 2 || len(list)%2 != 0 {
		return false, fmt.Errorf("%w: supported_versions does not parse", ErrMalformed)
	}
	tls13 := false
	for !list.Empty() {
		var v uint16
		list.ReadUint16(&v)
		tls13 = tls13 || v == versionTLS13
	}
	return tls13, nil
}

// Alerts the plane sends a client it refuses before any byte reaches a broker (RFC 8446 6): a
// fatal alert in a plaintext record, which a TLS client reports as the reason its handshake
// failed ("received fatal alert: unrecognized_name").
const (
	AlertHandshakeFailure = 40
	AlertDecodeError      = 50
	AlertInternalError    = 80
	AlertUnrecognizedName = 112
)

// alertRecord is the record of a fatal alert with the given description.
func alertRecord(desc byte) []byte {
	return []byte{21, 3, 3, 0, 2, 2, desc}
}
