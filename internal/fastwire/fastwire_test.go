package fastwire

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// inputs are every one- and two-byte input, and random longer ones (a length or varint that
// runs past the end, ten-byte varints, zero-length values).
func inputs() [][]byte {
	var in [][]byte
	for a := range 256 {
		in = append(in, []byte{byte(a)})
		for b := range 256 {
			in = append(in, []byte{byte(a), byte(b)})
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		b := make([]byte, 1+r.IntN(12))
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		if r.IntN(2) == 0 {
			b[0] &= 0x7f // mostly the fast path's lengths
		}
		in = append(in, b)
	}
	for _, v := range []uint64{0, 1, 127, 128, 4242, 1 << 35, 1<<63 - 1, 1 << 63, ^uint64(0)} {
		enc := protowire.AppendVarint(nil, v)
		in = append(in, enc, append(enc, 0x08), enc[:len(enc)-1])
	}
	over := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02} // over 64 bits
	return append(in, over, over[:9], nil, []byte{})
}

// TestSameAsProtowire: every read gives what protowire's does, errors included.
func TestSameAsProtowire(t *testing.T) {
	for _, b := range inputs() {
		n1, t1, l1 := ConsumeTag(b)
		n2, t2, l2 := protowire.ConsumeTag(b)
		if n1 != n2 || t1 != t2 || l1 != l2 {
			t.Fatalf("ConsumeTag(%x) = %d %d %d, protowire's %d %d %d", b, n1, t1, l1, n2, t2, l2)
		}
		v1, m1 := ConsumeVarint(b)
		v2, m2 := protowire.ConsumeVarint(b)
		if v1 != v2 || m1 != m2 {
			t.Fatalf("ConsumeVarint(%x) = %d %d, protowire's %d %d", b, v1, m1, v2, m2)
		}
		s1, k1 := ConsumeBytes(b)
		s2, k2 := protowire.ConsumeBytes(b)
		if !bytes.Equal(s1, s2) || k1 != k2 || cap(s1) != cap(s2) {
			t.Fatalf("ConsumeBytes(%x) = %x %d, protowire's %x %d", b, s1, k1, s2, k2)
		}
		for typ := range protowire.Type(8) {
			if f1, f2 := ConsumeFieldValue(3, typ, b), protowire.ConsumeFieldValue(3, typ, b); f1 != f2 {
				t.Fatalf("ConsumeFieldValue(3, %d, %x) = %d, protowire's %d", typ, b, f1, f2)
			}
		}
	}
}
