package frame

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// castagnoli is the CRC32C table; hash/crc32 uses the CPU's CRC32
// instruction for it where there is one.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum returns the CRC32C (Castagnoli) of b, the checksum of the
// payload section.
func Checksum(b []byte) uint32 {
	return crc32.Checksum(b, castagnoli)
}

// Payload is the parsed payload section of a SEND or MESSAGE frame. The
// byte slices alias the input of ParsePayload.
type Payload struct {
	// BrokerEntryMetadata is the serialized pb.BrokerEntryMetadata of the
	// 0x0e02 section, nil if the section is absent.
	BrokerEntryMetadata []byte
	// Checksum is the verified CRC32C of the 0x0e01 section.
	Checksum uint32
	// Metadata is the serialized pb.MessageMetadata.
	Metadata []byte
	// Data is the message payload (possibly compressed or a batch).
	Data []byte
}

// ParsePayload splits the payload section of a frame (Frame.Payload) into
// its parts and verifies the checksum. The 0x0e02 broker entry metadata
// section is optional; the 0x0e01 checksum section is required.
//
// The proxy's forwarding path does not need this; it is for tests and tools.
func ParsePayload(p []byte) (Payload, error) {
	var out Payload
	if len(p) >= 2 && binary.BigEndian.Uint16(p) == magicBrokerEntryMetadata {
		if len(p) < 6 {
			return Payload{}, fmt.Errorf("%w: broker entry metadata section truncated", ErrMalformed)
		}
		size := binary.BigEndian.Uint32(p[2:])
		if uint64(size) > uint64(len(p)-6) {
			return Payload{}, fmt.Errorf("%w: broker entry metadata size %d exceeds the %d bytes left", ErrMalformed, size, len(p)-6)
		}
		out.BrokerEntryMetadata = p[6 : 6+size : 6+size]
		p = p[6+size:]
	}
	if len(p) < 2 {
		return Payload{}, fmt.Errorf("%w: payload section of %d bytes has no magic number", ErrMalformed, len(p))
	}
	if m := binary.BigEndian.Uint16(p); m != magicCRC32C {
		return Payload{}, fmt.Errorf("%w: got 0x%04x, want 0x%04x", ErrBadMagic, m, magicCRC32C)
	}
	if len(p) < 2+4+4 {
		return Payload{}, fmt.Errorf("%w: checksum section of %d bytes is too short", ErrMalformed, len(p))
	}
	out.Checksum = binary.BigEndian.Uint32(p[2:])
	rest := p[6:]
	if sum := Checksum(rest); sum != out.Checksum {
		return Payload{}, fmt.Errorf("%w: frame says 0x%08x, computed 0x%08x", ErrBadChecksum, out.Checksum, sum)
	}
	size := binary.BigEndian.Uint32(rest)
	if uint64(size) > uint64(len(rest)-4) {
		return Payload{}, fmt.Errorf("%w: metadata size %d exceeds the %d bytes left", ErrMalformed, size, len(rest)-4)
	}
	out.Metadata = rest[4 : 4+size : 4+size]
	out.Data = rest[4+size:]
	return out, nil
}

// CheckSendPayload reports whether the payload section of a client's SEND is one a broker can
// read: the 0x0e01 section (after an optional 0x0e02 one) with its metadata size within the
// section and a MessageMetadata that decodes strictly (required fields included). A broker
// that has to read the metadata (an encrypted namespace, a chunk, a marker) closes the whole
// connection on one it cannot; the checksum is left to the broker, which answers a wrong one
// with SEND_ERROR on the producer alone.
func CheckSendPayload(p []byte) error {
	if len(p) >= 2 && binary.BigEndian.Uint16(p) == magicBrokerEntryMetadata {
		if len(p) < 6 || uint64(binary.BigEndian.Uint32(p[2:])) > uint64(len(p)-6) {
			return fmt.Errorf("%w: broker entry metadata section truncated", ErrMalformed)
		}
		p = p[6+binary.BigEndian.Uint32(p[2:]):]
	}
	if len(p) < 10 || binary.BigEndian.Uint16(p) != magicCRC32C {
		return fmt.Errorf("%w: no checksum section", ErrMalformed)
	}
	rest := p[6:]
	size := binary.BigEndian.Uint32(rest)
	if uint64(size) > uint64(len(rest)-4) {
		return fmt.Errorf("%w: metadata size %d exceeds the %d bytes left", ErrMalformed, size, len(rest)-4)
	}
	if canonicalMetadata(rest[4 : 4+size]) {
		return nil // decodes strictly, and has no unknown field to hold a group
	}
	md := new(pb.MessageMetadata)
	if err := strict.Unmarshal(rest[4:4+size], md); err != nil {
		return fmt.Errorf("%w: message metadata: %v", ErrMalformed, err)
	}
	if hasUnknownGroup(md.ProtoReflect()) {
		return fmt.Errorf("%w: message metadata: an unknown field of a group wire type", ErrMalformed)
	}
	return nil
}

// hasUnknownGroup reports whether m, or a message in it, has an unknown field of a group
// wire type: the broker's parser throws on those (where it skips other unknown fields), and
// closes the connection. The metadata is under the message's checksum, so it cannot be
// cleaned, only refused.
func hasUnknownGroup(m protoreflect.Message) bool {
	if groupIn(m.GetUnknown()) {
		return true
	}
	found := false
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Message() == nil || fd.IsMap():
		case fd.IsList():
			for i := 0; i < v.List().Len() && !found; i++ {
				found = hasUnknownGroup(v.List().Get(i).Message())
			}
		default:
			found = hasUnknownGroup(v.Message())
		}
		return !found
	})
	return found
}

// groupIn reports whether unknown-field bytes hold a group (or cannot be read).
func groupIn(b []byte) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ == protowire.StartGroupType || typ == protowire.EndGroupType {
			return true
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return true
		}
		b = b[n+m:]
	}
	return false
}
