package frame

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// marshal checks required fields (AllowPartial is false).
var marshal = proto.MarshalOptions{}

// AppendCommand appends a simple frame (header and command, no payload
// section) carrying cmd to dst. On error dst is returned unchanged.
func AppendCommand(dst []byte, cmd *pb.BaseCommand) ([]byte, error) {
	if cmd == nil {
		return dst, errors.New("frame: nil command")
	}
	start := len(dst)
	out, cmdSize, err := appendHeaderAndCommand(dst, cmd)
	if err != nil {
		return dst, err
	}
	return out, finishFrame(out[start:], cmdSize)
}

// AppendPayloadCommand appends a frame with a payload section (SEND,
// MESSAGE) to dst: the command, then, if brokerEntryMetadata is not nil,
// the 0x0e02 section carrying those (already serialized) bytes, then the
// 0x0e01 section with the CRC32C it computes over the metadata size, the
// metadata and the payload. On error dst is returned unchanged.
func AppendPayloadCommand(dst []byte, cmd *pb.BaseCommand, brokerEntryMetadata []byte, metadata *pb.MessageMetadata, payload []byte) ([]byte, error) {
	if cmd == nil {
		return dst, errors.New("frame: nil command")
	}
	if metadata == nil {
		return dst, errors.New("frame: nil message metadata")
	}
	start := len(dst)
	out, cmdSize, err := appendHeaderAndCommand(dst, cmd)
	if err != nil {
		return dst, err
	}
	if brokerEntryMetadata != nil {
		if uint64(len(brokerEntryMetadata)) > math.MaxUint32 {
			return dst, fmt.Errorf("%w: broker entry metadata of %d bytes", ErrFrameTooLarge, len(brokerEntryMetadata))
		}
		out = binary.BigEndian.AppendUint16(out, magicBrokerEntryMetadata)
		out = binary.BigEndian.AppendUint32(out, uint32(len(brokerEntryMetadata)))
		out = append(out, brokerEntryMetadata...)
	}
	out = binary.BigEndian.AppendUint16(out, magicCRC32C)
	crcAt := len(out)
	out = append(out, 0, 0, 0, 0, 0, 0, 0, 0) // checksum, metadata size
	mdAt := len(out)
	out, err = marshal.MarshalAppend(out, metadata)
	if err != nil {
		return dst, fmt.Errorf("frame: marshal message metadata: %w", err)
	}
	binary.BigEndian.PutUint32(out[mdAt-4:], uint32(len(out)-mdAt))
	out = append(out, payload...)
	binary.BigEndian.PutUint32(out[crcAt:], Checksum(out[crcAt+4:]))
	if err := finishFrame(out[start:], cmdSize); err != nil {
		return dst, err
	}
	return out, nil
}

// appendHeaderAndCommand appends room for the header and the marshalled
// command; finishFrame fills the header in once the frame is complete.
func appendHeaderAndCommand(dst []byte, cmd *pb.BaseCommand) ([]byte, int, error) {
	out := append(dst, 0, 0, 0, 0, 0, 0, 0, 0)
	at := len(out)
	out, err := marshal.MarshalAppend(out, cmd)
	if err != nil {
		return dst, 0, fmt.Errorf("frame: marshal %v command: %w", cmd.GetType(), err)
	}
	return out, len(out) - at, nil
}

// finishFrame writes totalSize and commandSize into frame[:HeaderSize].
func finishFrame(frame []byte, cmdSize int) error {
	if uint64(len(frame)-4) > math.MaxUint32 {
		return fmt.Errorf("%w: frame of %d bytes", ErrFrameTooLarge, len(frame))
	}
	binary.BigEndian.PutUint32(frame, uint32(len(frame)-4))
	binary.BigEndian.PutUint32(frame[4:], uint32(cmdSize))
	return nil
}

// writeBufs recycles the buffers of WriteCommand. Buffers that grew large
// are dropped rather than kept alive by the pool.
var writeBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

const maxPooledWriteBuf = 64 << 10

// WriteCommand encodes cmd as a simple frame and writes it with a single
// Write call, so frames written by concurrent callers that serialize their
// Writes (as net.Conn does) never interleave.
func WriteCommand(w io.Writer, cmd *pb.BaseCommand) error {
	bp := writeBufs.Get().(*[]byte)
	b, err := AppendCommand((*bp)[:0], cmd)
	if err == nil {
		_, err = w.Write(b)
	}
	if cap(b) <= maxPooledWriteBuf {
		*bp = b
		writeBufs.Put(bp)
	}
	return err
}
