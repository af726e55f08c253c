// Package fastwire reads protobuf's wire format as google.golang.org/protobuf/encoding/protowire
// does, with the same results, but without its calls for what makes up most of a Pulsar
// command: one-byte tags (fields 1 to 15), varints shorter than ten bytes, lengths under
// 128. The frame checks and the id mapping read every command's fields this way.
package fastwire

import "google.golang.org/protobuf/encoding/protowire"

// ConsumeTag is protowire.ConsumeTag.
func ConsumeTag(b []byte) (protowire.Number, protowire.Type, int) {
	if len(b) > 0 && b[0] < 0x80 && b[0] >= 1<<3 { // field 0 is invalid: protowire says why
		return protowire.Number(b[0] >> 3), protowire.Type(b[0] & 7), 1
	}
	return protowire.ConsumeTag(b)
}

// ConsumeVarint is protowire.ConsumeVarint.
func ConsumeVarint(b []byte) (uint64, int) {
	var v uint64
	for i := 0; i < len(b) && i < 9; i++ { // a tenth byte may overflow: protowire checks it
		v |= uint64(b[i]&0x7f) << (7 * i)
		if b[i] < 0x80 {
			return v, i + 1
		}
	}
	return protowire.ConsumeVarint(b)
}

// ConsumeBytes is protowire.ConsumeBytes.
func ConsumeBytes(b []byte) ([]byte, int) {
	if len(b) > 0 && b[0] < 0x80 && int(b[0]) < len(b) {
		return b[1 : 1+b[0]], 1 + int(b[0])
	}
	return protowire.ConsumeBytes(b)
}

// ConsumeFieldValue is protowire.ConsumeFieldValue.
func ConsumeFieldValue(num protowire.Number, typ protowire.Type, b []byte) int {
	switch typ {
	case protowire.VarintType:
		if _, n := ConsumeVarint(b); n < 10 {
			return n // an error (n < 0) too
		}
	case protowire.BytesType:
		if len(b) > 0 && b[0] < 0x80 && int(b[0]) < len(b) {
			return 1 + int(b[0])
		}
	}
	return protowire.ConsumeFieldValue(num, typ, b)
}
