package pulsarclient

import (
	"encoding/binary"
	"math/bits"
	"unicode/utf16"
)

// javaStringHash is Java's String.hashCode of s (over its UTF-16 code units), masked to a
// non-negative int as Pulsar's JavaStringHash does.
func javaStringHash(s string) uint32 {
	var h int32
	for _, r := range s {
		if r >= 0x10000 {
			r1, r2 := utf16.EncodeRune(r)
			h = 31*h + r1
			h = 31*h + r2
			continue
		}
		h = 31*h + r
	}
	return uint32(h) & 0x7fffffff
}

// murmur3Hash is Pulsar's Murmur3_32Hash of s's UTF-8 bytes (seed 0), masked to a
// non-negative int.
func murmur3Hash(s string) uint32 {
	const c1, c2 = 0xcc9e2d51, 0x1b873593
	data := []byte(s)
	var h uint32
	n := len(data) / 4
	for i := 0; i < n; i++ {
		k := binary.LittleEndian.Uint32(data[i*4:])
		k *= c1
		k = bits.RotateLeft32(k, 15)
		k *= c2
		h ^= k
		h = bits.RotateLeft32(h, 13)
		h = h*5 + 0xe6546b64
	}
	var k uint32
	tail := data[n*4:]
	switch len(tail) {
	case 3:
		k ^= uint32(tail[2]) << 16
		fallthrough
	case 2:
		k ^= uint32(tail[1]) << 8
		fallthrough
	case 1:
		k ^= uint32(tail[0])
		k *= c1
		k = bits.RotateLeft32(k, 15)
		k *= c2
		h ^= k
	}
	h ^= uint32(len(data))
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	return h & 0x7fffffff
}
