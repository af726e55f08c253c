// Package frame is the wire codec of the Pulsar binary protocol: it splits a
// byte stream into frames, peeks at or decodes the command of a frame,
// encodes commands, and parses the payload section of SEND/MESSAGE frames.
// It knows nothing about sessions, connections or routing.
//
// Frame layout (all integers big-endian):
//
//	[totalSize u32][commandSize u32][BaseCommand: commandSize bytes]
//	payload section, SEND and MESSAGE only:
//	  optional [0x0e02][u32 size][BrokerEntryMetadata]
//	  [0x0e01][CRC32C u32][u32 metadataSize][MessageMetadata][payload]
//
// totalSize counts every byte after itself; the CRC32C (Castagnoli) covers
// everything after the checksum field to the end of the frame.
package frame

import (
	"errors"
	"math"
)

const (
	// HeaderSize is the size of the fixed frame header: totalSize + commandSize.
	HeaderSize = 8
	// DefaultMaxFrameSize is the default limit on totalSize: a 5 MiB message
	// plus 10 KiB for the command and metadata (the broker's own default).
	DefaultMaxFrameSize = 5<<20 + 10<<10
)

// Sentinel errors. Functions of this package wrap them with detail
// (fmt.Errorf("%w: ...")); test with errors.Is.
var (
	ErrFrameTooLarge  = errors.New("frame: frame too large")
	ErrFrameTooSmall  = errors.New("frame: frame too small")
	ErrBadCommandSize = errors.New("frame: bad command size")
	ErrBadChecksum    = errors.New("frame: checksum mismatch")
	ErrBadMagic       = errors.New("frame: bad magic number")
	ErrMalformed      = errors.New("frame: malformed")
)

// Magic numbers that open the sections of a payload.
const (
	magicCRC32C              = 0x0e01
	magicBrokerEntryMetadata = 0x0e02
)

// effectiveMax maps maxFrameSize <= 0 to the default and clamps the limit to
// what the u32 totalSize field can express.
func effectiveMax(maxFrameSize int) int64 {
	if maxFrameSize <= 0 {
		return DefaultMaxFrameSize
	}
	if int64(maxFrameSize) > math.MaxUint32 {
		return math.MaxUint32
	}
	return int64(maxFrameSize)
}
