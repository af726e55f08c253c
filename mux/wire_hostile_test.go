package mux

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// The bytes path must not trust its caller's strict decode: what it sends has to be read by
// a broker as the mapping read it. These tests hand AppendUp commands that a strict reader
// refuses but the bytes path could copy as they came.

// lightProtoVarint is what Pulsar's LightProto reads for varint field fn of the sub-message
// of type t: tags are varints of which only the low 32 bits count, matched whole (number
// and wire type); the last occurrence wins, of a field as of the sub-message. ok=false: the
// parse throws (a group, bytes cut short).
func lightProtoVarint(command []byte, t pb.BaseCommand_Type, fn uint32) (v uint64, ok bool) {
	var sub []byte
	for b := command; len(b) > 0; {
		tag, n := lightProtoTag(b)
		if n < 0 {
			return 0, false
		}
		b = b[n:]
		if tag == uint32(t)<<3|uint32(protowire.BytesType) {
			s, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return 0, false
			}
			sub, b = s, b[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(protowire.Number(max(tag>>3, 1)), protowire.Type(tag&7), b)
		if m < 0 || tag&7 == 3 || tag&7 == 4 {
			return 0, false
		}
		b = b[m:]
	}
	for b := sub; len(b) > 0; {
		tag, n := lightProtoTag(b)
		if n < 0 || tag&7 == 3 || tag&7 == 4 {
			return 0, false
		}
		b = b[n:]
		m := protowire.ConsumeFieldValue(protowire.Number(max(tag>>3, 1)), protowire.Type(tag&7), b)
		if m < 0 {
			return 0, false
		}
		if tag == fn<<3 {
			v, _ = protowire.ConsumeVarint(b)
		}
		b = b[m:]
	}
	return v, true
}

// lightProtoTag reads a tag as LightProto's readVarInt does: up to ten bytes, the bits past
// the 32nd dropped.
func lightProtoTag(b []byte) (uint32, int) {
	var v uint64
	for i := 0; i < 10 && i < len(b); i++ {
		if i < 5 {
			v |= uint64(b[i]&0x7f) << (7 * i)
		}
		if b[i] < 0x80 {
			return uint32(v), i + 1
		}
	}
	return 0, -1
}

// TestUpBytesWideTagIsNoOtherProducer: a tag varint wider than 32 bits is read by Go as a
// field number over protobuf's largest (2^29-1, which ConsumeTag does not refuse) and by a
// broker as its low 32 bits: 1<<32|8 is producer_id there. Had the bytes path copied such a
// field as an unknown one, the broker would read the value after it, the victim's connection
// id (small and guessable), over the mapped one: the attacker's SEND would go out as the
// victim's producer. The same at the command's level: a second SEND sub-message under a wide
// tag wins over the mapped one. Refused, or sent with the attacker's own id, both pass.
func TestUpBytesWideTagIsNoOtherProducer(t *testing.T) {
	m := NewMapper()
	victim, attacker := NewClient(), NewClient()
	victimConn := acceptedProducer(t, m, victim, 1)
	attackerConn := acceptedProducer(t, m, attacker, 1)
	own := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 1) // its own producer 1
	own = protowire.AppendVarint(protowire.AppendTag(own, 2, protowire.VarintType), 1)
	other := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), victimConn)
	other = protowire.AppendVarint(protowire.AppendTag(other, 2, protowire.VarintType), 1)
	head := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), uint64(pb.BaseCommand_SEND))
	for name, raw := range map[string][]byte{
		// 88 80 80 80 10: field 2^29+1 to Go, producer_id to the broker
		"in the sub-message": protowire.AppendBytes(protowire.AppendTag(head, 6, protowire.BytesType),
			protowire.AppendVarint(protowire.AppendVarint(own, 1<<32|1<<3), victimConn)),
		// b2 80 80 80 10: field 2^29+6 to Go, a second SEND sub-message to the broker
		"beside it": protowire.AppendBytes(protowire.AppendVarint(
			protowire.AppendBytes(protowire.AppendTag(head, 6, protowire.BytesType), own),
			1<<32|6<<3|uint64(protowire.BytesType)), other),
	} {
		out, err := m.AppendUp(nil, attacker, raw)
		if err != nil {
			continue // refused
		}
		if got, ok := lightProtoVarint(out, pb.BaseCommand_SEND, 1); ok && got != attackerConn {
			t.Errorf("%s: AppendUp sent %x: a broker reads producer_id %d (the victim's; the attacker's is %d)", name, out, got, attackerConn)
		}
	}
}

// TestUpBytesRequiredIDAbsentIsRefused: a command without one of its required ids (a SEND
// without producer_id, an ACK without consumer_id) must not go out unmapped: a broker's
// parser throws on a missing required field and closes the shared connection under every
// client on it.
func TestUpBytesRequiredIDAbsentIsRefused(t *testing.T) {
	m := NewMapper()
	c := NewClient()
	acceptedProducer(t, m, c, 1)
	for _, tc := range []struct {
		t   pb.BaseCommand_Type
		sub []byte
	}{
		{pb.BaseCommand_SEND, protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.VarintType), 1)},           // sequence_id only
		{pb.BaseCommand_ACK, protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.VarintType), 0)},            // ack_type only
		{pb.BaseCommand_CLOSE_PRODUCER, protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 1)}, // producer_id, no request_id
		{pb.BaseCommand_FLOW, protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.VarintType), 1000)},        // message_permits only
		{pb.BaseCommand_SEND, protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte{1})},     // producer_id of another wire type
	} {
		raw := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), uint64(tc.t))
		raw = protowire.AppendBytes(protowire.AppendTag(raw, protowire.Number(tc.t), protowire.BytesType), tc.sub)
		if out, err := m.AppendUp(nil, c, raw); err == nil {
			t.Errorf("AppendUp sent %v without a required id: %x", tc.t, out)
		}
	}
}
