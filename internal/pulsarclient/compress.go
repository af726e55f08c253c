package pulsarclient

import (
	"bytes"
	"compress/zlib"
	"fmt"
	"io"

	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// The codecs of Pulsar's CompressionType, as its clients write them: LZ4 as a raw block,
// ZLIB with its header, ZSTD as a frame, SNAPPY as a raw block.

// codecs holds what the codecs keep between uses, shared by every Client of a Factory:
// zstd's encoder and decoder (their EncodeAll and DecodeAll are safe for concurrent use).
type codecs struct {
	zstdEncoder *zstd.Encoder
	zstdDecoder *zstd.Decoder
}

func newCodecs() *codecs {
	enc, _ := zstd.NewWriter(nil)
	dec, _ := zstd.NewReader(nil, zstd.WithDecoderMaxMemory(64<<20))
	return &codecs{zstdEncoder: enc, zstdDecoder: dec}
}

// compress encodes payload with codec c.
func (z *codecs) compress(c pb.CompressionType, payload []byte) ([]byte, error) {
	switch c {
	case pb.CompressionType_NONE:
		return payload, nil
	case pb.CompressionType_LZ4:
		out := make([]byte, lz4.CompressBlockBound(len(payload)))
		n, err := lz4.CompressBlock(payload, out, nil)
		if err != nil {
			return nil, err
		}
		if n == 0 { // incompressible: LZ4 still wants a block, written as literals
			return lz4Literals(payload), nil
		}
		return out[:n], nil
	case pb.CompressionType_ZLIB:
		var b bytes.Buffer
		w := zlib.NewWriter(&b)
		w.Write(payload)
		w.Close()
		return b.Bytes(), nil
	case pb.CompressionType_ZSTD:
		return z.zstdEncoder.EncodeAll(payload, nil), nil
	case pb.CompressionType_SNAPPY:
		return snappy.Encode(nil, payload), nil
	}
	return nil, fmt.Errorf("unknown compression type %v", c)
}

// lz4Literals is payload as one LZ4 block sequence of literals only.
func lz4Literals(p []byte) []byte {
	out := make([]byte, 0, len(p)+len(p)/255+16)
	n := len(p)
	if n < 15 {
		out = append(out, byte(n<<4))
	} else {
		out = append(out, 0xf0)
		for n -= 15; n >= 255; n -= 255 {
			out = append(out, 255)
		}
		out = append(out, byte(n))
	}
	return append(out, p...)
}

// decompress decodes data of codec c to its uncompressed size (at most limit bytes).
func (z *codecs) decompress(c pb.CompressionType, data []byte, size uint32, limit int) ([]byte, error) {
	if c == pb.CompressionType_NONE {
		return data, nil
	}
	if int64(size) > int64(limit) {
		return nil, fmt.Errorf("uncompressed size %d over the limit of %d", size, limit)
	}
	switch c {
	case pb.CompressionType_LZ4:
		out := make([]byte, size)
		n, err := lz4.UncompressBlock(data, out)
		if err != nil || n != int(size) {
			return nil, fmt.Errorf("lz4: %v (%d of %d bytes)", err, n, size)
		}
		return out, nil
	case pb.CompressionType_ZLIB:
		r, err := zlib.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, err
		}
		return readAtMost(r, size)
	case pb.CompressionType_ZSTD:
		out, err := z.zstdDecoder.DecodeAll(data, make([]byte, 0, size))
		if err == nil && len(out) != int(size) {
			err = fmt.Errorf("zstd: %d bytes, the metadata says %d", len(out), size)
		}
		return out, err
	case pb.CompressionType_SNAPPY:
		if n, err := snappy.DecodedLen(data); err != nil || n != int(size) {
			return nil, fmt.Errorf("snappy: decoded length %d, the metadata says %d (%v)", n, size, err)
		}
		return snappy.Decode(nil, data)
	}
	return nil, fmt.Errorf("unknown compression type %v", c)
}

func readAtMost(r io.Reader, size uint32) ([]byte, error) {
	out := make([]byte, size)
	if _, err := io.ReadFull(r, out); err != nil {
		return nil, err
	}
	return out, nil
}
