package frame

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"unsafe"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// unhex decodes hex written with spaces for readability.
func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

// Golden frames. The bytes are written out by hand from the protocol spec:
// protobuf tags (field<<3 | wire type), varints, big-endian sizes, and
// CRC32C values computed by an independent bitwise implementation.
type golden struct {
	name     string
	frame    string // the whole frame, hex
	command  string // the BaseCommand bytes, hex
	typ      pb.BaseCommand_Type
	cmd      *pb.BaseCommand
	payload  bool
	bem      string // broker entry metadata bytes, hex ("" = none)
	metadata *pb.MessageMetadata
	crc      uint32
	data     string
}

var testMetadata = &pb.MessageMetadata{
	ProducerName: proto.String("p"),
	SequenceId:   proto.Uint64(7),
	PublishTime:  proto.Uint64(1000),
}

var goldens = []golden{
	{
		name: "CONNECT",
		// total 15, command 11
		// 08 02                type = CONNECT (2)
		// 12 07                field 2 (connect), 7 bytes:
		//   0a 03 32 2e 30       client_version = "2.0"
		//   20 15                protocol_version = 21
		frame:   "0000000f 0000000b  0802 1207 0a03322e30 2015",
		command: "0802 1207 0a03322e30 2015",
		typ:     pb.BaseCommand_CONNECT,
		cmd: &pb.BaseCommand{
			Type: pb.BaseCommand_CONNECT.Enum(),
			Connect: &pb.CommandConnect{
				ClientVersion:   proto.String("2.0"),
				ProtocolVersion: proto.Int32(21),
			},
		},
	},
	{
		name: "PING",
		// total 9, command 5
		// 08 12                type = PING (18)
		// 92 01 00             field 18 (ping), empty message
		frame:   "00000009 00000005  0812 920100",
		command: "0812 920100",
		typ:     pb.BaseCommand_PING,
		cmd:     Ping(),
	},
	{
		name: "SEND",
		// total 32, command 8
		// 08 06                type = SEND (6)
		// 32 04 08 01 10 07    field 6 (send): producer_id 1, sequence_id 7
		// 0e 01                checksum magic
		// 90 bb 0e 5a          CRC32C of the 14 bytes that follow
		// 00 00 00 08          metadata size
		// 0a 01 70 10 07 18 e8 07   producer_name "p", sequence_id 7, publish_time 1000
		// 68 69                "hi"
		frame:   "00000020 00000008  0806 3204 0801 1007  0e01 90bb0e5a 00000008 0a0170 1007 18e807 6869",
		command: "0806 3204 0801 1007",
		typ:     pb.BaseCommand_SEND,
		cmd: &pb.BaseCommand{
			Type: pb.BaseCommand_SEND.Enum(),
			Send: &pb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(7)},
		},
		payload:  true,
		metadata: testMetadata,
		crc:      0x90bb0e5a,
		data:     "6869",
	},
	{
		name: "MESSAGE with broker entry metadata",
		// total 54, command 12
		// 08 09                type = MESSAGE (9)
		// 4a 08                field 9 (message), 8 bytes:
		//   08 03                consumer_id 3
		//   12 04 08 0a 10 14    message_id {ledgerId 10, entryId 20}
		// 0e 02 00000009       broker entry metadata magic, 9 bytes:
		//   08 80d095ffbc31      broker_timestamp 1700000000000
		//   10 05                index 5
		// 0e 01 1ec5e22a       checksum magic, CRC32C
		// 00000008 ...         metadata as in SEND
		// 68 65 6c 6c 6f       "hello"
		frame: "00000036 0000000c  0809 4a08 0803 1204080a1014" +
			"  0e02 00000009 0880d095ffbc31 1005" +
			"  0e01 1ec5e22a 00000008 0a0170 1007 18e807 68656c6c6f",
		command: "0809 4a08 0803 1204080a1014",
		typ:     pb.BaseCommand_MESSAGE,
		cmd: &pb.BaseCommand{
			Type: pb.BaseCommand_MESSAGE.Enum(),
			Message: &pb.CommandMessage{
				ConsumerId: proto.Uint64(3),
				MessageId:  &pb.MessageIdData{LedgerId: proto.Uint64(10), EntryId: proto.Uint64(20)},
			},
		},
		payload:  true,
		bem:      "0880d095ffbc31 1005",
		metadata: testMetadata,
		crc:      0x1ec5e22a,
		data:     "68656c6c6f",
	},
}

func (g golden) encode(dst []byte) ([]byte, error) {
	if !g.payload {
		return AppendCommand(dst, g.cmd)
	}
	var bem []byte
	if g.bem != "" {
		bem, _ = hex.DecodeString(strings.Join(strings.Fields(g.bem), ""))
	}
	data, _ := hex.DecodeString(g.data)
	return AppendPayloadCommand(dst, g.cmd, bem, g.metadata, data)
}

func TestGoldenEncode(t *testing.T) {
	for _, g := range goldens {
		t.Run(g.name, func(t *testing.T) {
			want := unhex(t, g.frame)
			got, err := g.encode(nil)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("encoded\n got %x\nwant %x", got, want)
			}
			// Appending keeps what is already in dst.
			prefix := []byte("prefix")
			got, err = g.encode(append([]byte(nil), prefix...))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, append(prefix, want...)) {
				t.Fatalf("appended\n got %x\nwant %x%x", got, prefix, want)
			}
		})
	}
}

func TestGoldenDecode(t *testing.T) {
	var stream []byte
	for _, g := range goldens {
		stream = append(stream, unhex(t, g.frame)...)
	}
	r := NewReader(bytes.NewReader(stream), DefaultMaxFrameSize)
	for _, g := range goldens {
		t.Run(g.name, func(t *testing.T) {
			f, err := r.ReadFrame()
			if err != nil {
				t.Fatal(err)
			}
			if want := unhex(t, g.command); !bytes.Equal(f.Command, want) {
				t.Fatalf("command\n got %x\nwant %x", f.Command, want)
			}
			typ, err := PeekType(f.Command)
			if err != nil || typ != g.typ {
				t.Fatalf("PeekType = %v, %v; want %v", typ, err, g.typ)
			}
			cmd, err := Decode(f.Command)
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(cmd, g.cmd) {
				t.Fatalf("Decode = %v; want %v", cmd, g.cmd)
			}
			if !g.payload {
				if f.Payload != nil {
					t.Fatalf("simple frame has payload %x", f.Payload)
				}
				return
			}
			p, err := ParsePayload(f.Payload)
			if err != nil {
				t.Fatal(err)
			}
			if g.bem == "" {
				if p.BrokerEntryMetadata != nil {
					t.Fatalf("unexpected broker entry metadata %x", p.BrokerEntryMetadata)
				}
			} else {
				if want := unhex(t, g.bem); !bytes.Equal(p.BrokerEntryMetadata, want) {
					t.Fatalf("broker entry metadata %x, want %x", p.BrokerEntryMetadata, want)
				}
				var bem pb.BrokerEntryMetadata
				if err := proto.Unmarshal(p.BrokerEntryMetadata, &bem); err != nil ||
					bem.GetBrokerTimestamp() != 1700000000000 || bem.GetIndex() != 5 {
					t.Fatalf("broker entry metadata decodes to %v, %v", &bem, err)
				}
			}
			if p.Checksum != g.crc {
				t.Fatalf("checksum 0x%08x, want 0x%08x", p.Checksum, g.crc)
			}
			var md pb.MessageMetadata
			if err := proto.Unmarshal(p.Metadata, &md); err != nil || !proto.Equal(&md, g.metadata) {
				t.Fatalf("metadata decodes to %v, %v", &md, err)
			}
			if want := unhex(t, g.data); !bytes.Equal(p.Data, want) {
				t.Fatalf("data %x, want %x", p.Data, want)
			}
		})
	}
	if _, err := r.ReadFrame(); err != io.EOF {
		t.Fatalf("after the last frame: %v, want io.EOF", err)
	}
}

func TestChecksumKnownVector(t *testing.T) {
	// The CRC-32C check value from the catalogue of CRC algorithms.
	if got := Checksum([]byte("123456789")); got != 0xe3069283 {
		t.Fatalf("Checksum = 0x%08x, want 0xe3069283", got)
	}
}

func header(total, cmd uint32) []byte {
	return []byte{byte(total >> 24), byte(total >> 16), byte(total >> 8), byte(total),
		byte(cmd >> 24), byte(cmd >> 16), byte(cmd >> 8), byte(cmd)}
}

func TestParseHeader(t *testing.T) {
	tests := []struct {
		name      string
		hdr       []byte
		max       int
		total     uint32
		cmd       uint32
		wantErr   error
		errSubstr string
	}{
		{name: "smallest frame", hdr: header(5, 1), max: DefaultMaxFrameSize, total: 5, cmd: 1},
		{name: "largest frame", hdr: header(DefaultMaxFrameSize, 1), max: DefaultMaxFrameSize, total: DefaultMaxFrameSize, cmd: 1},
		{name: "command fills frame", hdr: header(100, 96), max: DefaultMaxFrameSize, total: 100, cmd: 96},
		{name: "max <= 0 means default", hdr: header(DefaultMaxFrameSize, 1), max: 0, total: DefaultMaxFrameSize, cmd: 1},
		{name: "total size 0", hdr: header(0, 0), max: DefaultMaxFrameSize, wantErr: ErrFrameTooSmall},
		{name: "total size 4", hdr: header(4, 0), max: DefaultMaxFrameSize, wantErr: ErrFrameTooSmall},
		{name: "short header", hdr: header(5, 1)[:7], max: DefaultMaxFrameSize, wantErr: ErrFrameTooSmall},
		{name: "total size 0xFFFFFFFF", hdr: header(0xFFFFFFFF, 1), max: DefaultMaxFrameSize, wantErr: ErrFrameTooLarge},
		{name: "one over default", hdr: header(DefaultMaxFrameSize+1, 1), max: 0, wantErr: ErrFrameTooLarge},
		{name: "one over custom", hdr: header(101, 1), max: 100, wantErr: ErrFrameTooLarge, errSubstr: "101"},
		{name: "command size 0", hdr: header(10, 0), max: DefaultMaxFrameSize, wantErr: ErrBadCommandSize},
		{name: "command size > frame", hdr: header(10, 7), max: DefaultMaxFrameSize, wantErr: ErrBadCommandSize},
		{name: "command size 0xFFFFFFFF", hdr: header(10, 0xFFFFFFFF), max: DefaultMaxFrameSize, wantErr: ErrBadCommandSize},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			total, cmd, err := ParseHeader(tt.hdr, tt.max)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.errSubstr) {
					t.Fatalf("err %q lacks %q", err, tt.errSubstr)
				}
				return
			}
			if err != nil || total != tt.total || cmd != tt.cmd {
				t.Fatalf("= %d, %d, %v; want %d, %d", total, cmd, err, tt.total, tt.cmd)
			}
		})
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

func TestReaderErrors(t *testing.T) {
	ping := unhex(t, goldens[1].frame)
	errBoom := errors.New("boom")
	tests := []struct {
		name    string
		in      io.Reader
		frames  int // good frames before the error
		wantErr error
	}{
		{name: "empty stream", in: bytes.NewReader(nil), wantErr: io.EOF},
		{name: "clean end", in: bytes.NewReader(ping), frames: 1, wantErr: io.EOF},
		{name: "truncated header", in: bytes.NewReader(ping[:3]), wantErr: io.ErrUnexpectedEOF},
		{name: "truncated frame", in: bytes.NewReader(ping[:len(ping)-1]), wantErr: io.ErrUnexpectedEOF},
		{name: "frame then truncated frame", in: bytes.NewReader(append(append([]byte{}, ping...), ping[:10]...)), frames: 1, wantErr: io.ErrUnexpectedEOF},
		{name: "header only", in: bytes.NewReader(ping[:HeaderSize]), wantErr: io.ErrUnexpectedEOF},
		{name: "total size 0", in: bytes.NewReader(header(0, 0)), wantErr: ErrFrameTooSmall},
		{name: "total size 0xFFFFFFFF", in: bytes.NewReader(header(0xFFFFFFFF, 5)), wantErr: ErrFrameTooLarge},
		{name: "command size > frame", in: bytes.NewReader(append(header(9, 6), 0x08, 0x12, 0x92, 0x01, 0x00)), wantErr: ErrBadCommandSize},
		{name: "reader error", in: io.MultiReader(bytes.NewReader(ping), errReader{errBoom}), frames: 1, wantErr: errBoom},
		{name: "reader error mid frame", in: io.MultiReader(bytes.NewReader(ping[:5]), errReader{errBoom}), wantErr: errBoom},
		{name: "no progress", in: errReader{nil}, wantErr: io.ErrNoProgress},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewReader(tt.in, DefaultMaxFrameSize)
			for i := 0; i < tt.frames; i++ {
				f, err := r.ReadFrame()
				if err != nil {
					t.Fatalf("frame %d: %v", i, err)
				}
				if !bytes.Equal(f.Command, ping[HeaderSize:]) {
					t.Fatalf("frame %d: command %x", i, f.Command)
				}
			}
			_, err := r.ReadFrame()
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == io.EOF && err != io.EOF) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			// Sticky: the stream is out of step after an error.
			if _, err2 := r.ReadFrame(); err2 != err {
				t.Fatalf("second call: %v, want the same %v", err2, err)
			}
		})
	}
}

func TestReaderDoesNotTrustHeaderSize(t *testing.T) {
	for _, tt := range []struct {
		name    string
		total   uint32
		wantErr error
	}{
		{"within the limit but never sent", DefaultMaxFrameSize, io.ErrUnexpectedEOF},
		{"over the limit", 0xFFFFFFFF, ErrFrameTooLarge},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := append(header(tt.total, 5), make([]byte, 100)...)
			r := NewReader(bytes.NewReader(in), DefaultMaxFrameSize)
			_, err := r.ReadFrame()
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if c := cap(r.buf); c > initialBufSize {
				t.Fatalf("buffer grew to %d bytes for 108 bytes of input", c)
			}
		})
	}
	// The same through allocation counts: the failing reads allocate only
	// small things (the error, at most the initial buffer).
	in := header(DefaultMaxFrameSize, 5)
	allocs := testing.AllocsPerRun(20, func() {
		r := NewReader(bytes.NewReader(in), DefaultMaxFrameSize)
		_, _ = r.ReadFrame()
	})
	if allocs > 5 {
		t.Fatalf("%v allocations for a frame that never arrives", allocs)
	}
}

// chunkReader returns at most n bytes per Read.
type chunkReader struct {
	b []byte
	n int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	m := copy(p[:min(len(p), c.n)], c.b)
	c.b = c.b[m:]
	return m, nil
}

func TestReaderGrowsWithData(t *testing.T) {
	const limit = 1 << 20
	data := bytes.Repeat([]byte{0xab}, limit-100)
	fr, err := AppendPayloadCommand(nil, goldens[2].cmd, nil, testMetadata, data)
	if err != nil {
		t.Fatal(err)
	}
	if len(fr) > limit {
		t.Fatalf("test frame of %d bytes is over the limit", len(fr))
	}
	// A second, small frame after the big one.
	fr, _ = AppendCommand(fr, Ping())
	r := NewReader(&chunkReader{b: fr, n: 4096}, limit)
	f, err := r.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	p, err := ParsePayload(f.Payload)
	if err != nil || !bytes.Equal(p.Data, data) {
		t.Fatalf("payload: %v", err)
	}
	if c := cap(r.buf); c > HeaderSize+limit {
		t.Fatalf("buffer %d > HeaderSize+limit", c)
	}
	f, err = r.ReadFrame()
	if err != nil || !bytes.Equal(f.Command, unhex(t, goldens[1].command)) {
		t.Fatalf("second frame: %x, %v", f.Command, err)
	}
	if _, err := r.ReadFrame(); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
}

func TestReaderExactLimit(t *testing.T) {
	const limit = 1000
	cmd, _ := AppendCommand(nil, Ping())
	body := make([]byte, limit-4-(len(cmd)-HeaderSize))
	fr := append(cmd, body...)
	fr[3] = byte(limit & 0xff)
	fr[2] = byte(limit >> 8)
	r := NewReader(bytes.NewReader(append(fr, fr...)), limit)
	for i := 0; i < 2; i++ {
		f, err := r.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if len(f.Payload) != len(body) {
			t.Fatalf("payload %d bytes, want %d", len(f.Payload), len(body))
		}
	}
	if c := cap(r.buf); c > HeaderSize+limit {
		t.Fatalf("buffer %d > HeaderSize+limit", c)
	}
}

func TestReaderChunking(t *testing.T) {
	var stream []byte
	for i := 0; i < 50; i++ {
		for _, g := range goldens {
			stream = append(stream, unhex(t, g.frame)...)
		}
	}
	want := readAllFrames(NewReader(bytes.NewReader(stream), 0))
	for name, in := range map[string]io.Reader{
		"one byte":   iotest.OneByteReader(bytes.NewReader(stream)),
		"half":       iotest.HalfReader(bytes.NewReader(stream)),
		"data+EOF":   iotest.DataErrReader(bytes.NewReader(stream)),
		"7 at once":  &chunkReader{b: stream, n: 7},
		"big chunks": &chunkReader{b: stream, n: 1000},
	} {
		t.Run(name, func(t *testing.T) {
			got := readAllFrames(NewReader(in, 0))
			if !equalFrames(got, want) {
				t.Fatalf("got %d frames / %v, want %d frames / %v", len(got.frames), got.err, len(want.frames), want.err)
			}
		})
	}
	if len(want.frames) != 50*len(goldens) || want.err != io.EOF {
		t.Fatalf("reference read %d frames, %v", len(want.frames), want.err)
	}
}

func TestReaderBuffered(t *testing.T) {
	ping := unhex(t, goldens[1].frame)
	send := unhex(t, goldens[2].frame)
	stream := append(append(append([]byte{}, ping...), send...), "raw"...)
	r := NewReader(bytes.NewReader(stream), 0)
	if b := r.Buffered(); len(b) != 0 {
		t.Fatalf("Buffered before reading: %x", b)
	}
	if _, err := r.ReadFrame(); err != nil {
		t.Fatal(err)
	}
	// bytes.Reader hands over everything at once: the rest is buffered.
	if b := r.Buffered(); !bytes.Equal(b, stream[len(ping):]) {
		t.Fatalf("Buffered = %x, want %x", b, stream[len(ping):])
	}
	if _, err := r.ReadFrame(); err != nil {
		t.Fatal(err)
	}
	if b := r.Buffered(); string(b) != "raw" {
		t.Fatalf("Buffered = %q, want %q", b, "raw")
	}
}

// loopReader returns the same bytes forever.
type loopReader struct {
	b   []byte
	off int
}

func (l *loopReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		m := copy(p[n:], l.b[l.off:])
		n += m
		l.off = (l.off + m) % len(l.b)
	}
	return n, nil
}

func TestReaderSteadyStateAllocs(t *testing.T) {
	fr := unhex(t, goldens[3].frame)
	r := NewReader(&loopReader{b: fr}, 0)
	allocs := testing.AllocsPerRun(1000, func() {
		f, err := r.ReadFrame()
		if err != nil || len(f.Command) != 12 {
			t.Fatalf("ReadFrame: %v", err)
		}
	})
	if allocs != 0 {
		t.Fatalf("ReadFrame allocates %v times per frame", allocs)
	}
}

func TestPeekType(t *testing.T) {
	tests := []struct {
		name    string
		command string
		want    pb.BaseCommand_Type
		wantErr bool
	}{
		{name: "PING", command: "0812 920100", want: pb.BaseCommand_PING},
		{name: "type after the sub-command", command: "920100 0812", want: pb.BaseCommand_PING},
		{name: "other fields first", command: "4a08 0803 1204080a1014 0809", want: pb.BaseCommand_MESSAGE},
		{name: "largest type", command: "0844", want: pb.BaseCommand_TOPIC_MIGRATED},
		{name: "unknown type only", command: "08e807", want: 1000},
		{name: "unknown value 1", command: "0801", want: 1},
		{name: "over-long varint of a small type", command: "089280808000", want: pb.BaseCommand_PING},
		// A broker keeps the last type field it can read; two readers could disagree.
		{name: "two type fields", command: "0802 0812", wantErr: true},
		{name: "unknown value after a known one", command: "0812 08e807", wantErr: true},
		{name: "field 1 as bytes beside the type", command: "0a00 0802 1207 0a03322e30 2015", wantErr: true},
		{name: "negative type", command: "08ffffffffffffffffff01", wantErr: true},
		{name: "type wider than int32", command: "088280808010", wantErr: true},
		{name: "group field", command: "0812 1b1c", wantErr: true},
		{name: "no type", command: "920100", wantErr: true},
		{name: "empty", command: "", wantErr: true},
		{name: "truncated varint", command: "08", wantErr: true},
		{name: "truncated sub-command", command: "0812 9201", wantErr: true},
		{name: "field number 0", command: "0012", wantErr: true},
		{name: "end group without start", command: "0812 0c", wantErr: true},
		// A broker reads a tag as its low 32 bits: 1<<32|8 is a second type field to it
		// (PRODUCER after SEND), an unknown field 2^29+1 to protowire.
		{name: "tag over 32 bits", command: "0806 8880808010 05", wantErr: true},
		{name: "largest field number", command: "0812 f8ffffff0f 00", want: pb.BaseCommand_PING},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := unhex(t, tt.command)
			got, err := PeekType(b)
			if tt.wantErr {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("err = %v, want ErrMalformed", err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("PeekType = %v, want %v", got, tt.want)
			}
			// Whenever both accept a command, they agree on its type.
			if cmd, err := Decode(b); err == nil && !tt.wantErr && cmd.GetType() != got {
				t.Fatalf("Decode says %v, PeekType %v (%v)", cmd.GetType(), got, err)
			}
		})
	}
}

func TestPeekTypeAllocs(t *testing.T) {
	cmd := unhex(t, goldens[3].command)
	allocs := testing.AllocsPerRun(1000, func() {
		if typ, err := PeekType(cmd); err != nil || typ != pb.BaseCommand_MESSAGE {
			t.Fatal(typ, err)
		}
	})
	if allocs != 0 {
		t.Fatalf("PeekType allocates %v times", allocs)
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, tt := range []struct{ name, command string }{
		{"not protobuf", "ffffffff"},
		{"truncated", "0802 1207 0a03"},
		{"missing type", "1207 0a03322e30 2015"},
		{"missing nested required field", "0802 1202 2015"}, // CONNECT without client_version
		{"empty", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cmd, err := Decode(unhex(t, tt.command))
			if !errors.Is(err, ErrMalformed) || cmd != nil {
				t.Fatalf("Decode = %v, %v; want ErrMalformed", cmd, err)
			}
		})
	}
}

func TestDecodeKeepsUnknownFields(t *testing.T) {
	// PING plus field 200 (varint 1), unknown to the schema.
	in := unhex(t, "0812 920100 c00c01")
	cmd, err := Decode(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := AppendCommand(nil, cmd)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out[HeaderSize:], in) {
		t.Fatalf("re-encoded %x, want %x", out[HeaderSize:], in)
	}
}

func TestParsePayloadErrors(t *testing.T) {
	send := unhex(t, goldens[2].frame)
	sendPayload := send[HeaderSize+8:]
	msg := unhex(t, goldens[3].frame)
	msgPayload := msg[HeaderSize+12:]
	flip := func(b []byte, i int) []byte {
		c := append([]byte(nil), b...)
		c[i] ^= 1
		return c
	}
	// A checksum section whose metadata size is wrong but whose CRC is right.
	bogusSize := append([]byte{0x0e, 0x01, 0, 0, 0, 0}, 0, 0, 0, 99, 0xaa)
	putU32(bogusSize[2:], Checksum(bogusSize[6:]))

	tests := []struct {
		name    string
		p       []byte
		wantErr error
	}{
		{"bad magic", flip(sendPayload, 1), ErrBadMagic},
		{"other magic", append([]byte{0x12, 0x34}, sendPayload[2:]...), ErrBadMagic},
		{"bad checksum (data)", flip(sendPayload, len(sendPayload)-1), ErrBadChecksum},
		{"bad checksum (metadata)", flip(sendPayload, 12), ErrBadChecksum},
		{"bad checksum (crc field)", flip(sendPayload, 2), ErrBadChecksum},
		{"bad checksum after broker entry metadata", flip(msgPayload, len(msgPayload)-1), ErrBadChecksum},
		{"empty", nil, ErrMalformed},
		{"one byte", []byte{0x0e}, ErrMalformed},
		{"magic only", []byte{0x0e, 0x01}, ErrMalformed},
		{"no metadata size", sendPayload[:8], ErrMalformed},
		{"metadata size too large", bogusSize, ErrMalformed},
		{"broker entry metadata truncated", []byte{0x0e, 0x02, 0, 0}, ErrMalformed},
		{"broker entry metadata size too large", append([]byte{0x0e, 0x02, 0, 0, 0x10, 0}, sendPayload...), ErrMalformed},
		{"broker entry metadata then nothing", []byte{0x0e, 0x02, 0, 0, 0, 0}, ErrMalformed},
		{"two broker entry metadata sections", append([]byte{0x0e, 0x02, 0, 0, 0, 0}, msgPayload...), ErrBadMagic},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ParsePayload(tt.p); !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
		})
	}
}

func putU32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
}

func TestEmptyBrokerEntryMetadata(t *testing.T) {
	// Non-nil but empty broker entry metadata is written as a 0-byte section.
	fr, err := AppendPayloadCommand(nil, goldens[2].cmd, []byte{}, testMetadata, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := ParsePayload(fr[HeaderSize+8:])
	if err != nil {
		t.Fatal(err)
	}
	if p.BrokerEntryMetadata == nil || len(p.BrokerEntryMetadata) != 0 || len(p.Data) != 0 {
		t.Fatalf("got %+v", p)
	}
}

func TestEncodeErrors(t *testing.T) {
	dst := []byte("keep")
	for _, tt := range []struct {
		name string
		do   func() ([]byte, error)
	}{
		{"nil command", func() ([]byte, error) { return AppendCommand(dst, nil) }},
		{"missing type", func() ([]byte, error) { return AppendCommand(dst, &pb.BaseCommand{Ping: &pb.CommandPing{}}) }},
		{"missing nested required", func() ([]byte, error) {
			return AppendCommand(dst, &pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: &pb.CommandConnect{}})
		}},
		{"nil payload command", func() ([]byte, error) { return AppendPayloadCommand(dst, nil, nil, testMetadata, nil) }},
		{"nil metadata", func() ([]byte, error) { return AppendPayloadCommand(dst, goldens[2].cmd, nil, nil, nil) }},
		{"metadata missing required", func() ([]byte, error) {
			return AppendPayloadCommand(dst, goldens[2].cmd, nil, &pb.MessageMetadata{}, nil)
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, err := tt.do()
			if err == nil {
				t.Fatal("no error")
			}
			if string(out) != "keep" {
				t.Fatalf("dst changed to %q", out)
			}
		})
	}
}

type countingWriter struct {
	bytes.Buffer
	writes int
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.writes++
	return w.Buffer.Write(p)
}

func TestWriteCommand(t *testing.T) {
	var w countingWriter
	if err := WriteCommand(&w, goldens[0].cmd); err != nil {
		t.Fatal(err)
	}
	if w.writes != 1 || !bytes.Equal(w.Bytes(), unhex(t, goldens[0].frame)) {
		t.Fatalf("%d writes of %x", w.writes, w.Bytes())
	}
	if err := WriteCommand(&w, &pb.BaseCommand{}); err == nil || w.writes != 1 {
		t.Fatalf("invalid command: err %v, %d writes", err, w.writes)
	}
	errBoom := errors.New("boom")
	if err := WriteCommand(errWriter{errBoom}, Ping()); err != errBoom {
		t.Fatalf("write error: %v", err)
	}
}

type errWriter struct{ err error }

func (w errWriter) Write([]byte) (int, error) { return 0, w.err }

func TestConstructors(t *testing.T) {
	roundTrip := func(t *testing.T, cmd *pb.BaseCommand) *pb.BaseCommand {
		t.Helper()
		b, err := AppendCommand(nil, cmd)
		if err != nil {
			t.Fatal(err)
		}
		f, err := NewReader(bytes.NewReader(b), 0).ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(f.Command)
		if err != nil {
			t.Fatal(err)
		}
		if typ, err := PeekType(f.Command); err != nil || typ != cmd.GetType() {
			t.Fatalf("PeekType %v, %v", typ, err)
		}
		return got
	}
	c := roundTrip(t, Connected("pulsar-proxy 1.0", 21, 5<<20))
	if c.GetType() != pb.BaseCommand_CONNECTED || c.GetConnected().GetServerVersion() != "pulsar-proxy 1.0" ||
		c.GetConnected().GetProtocolVersion() != 21 || c.GetConnected().GetMaxMessageSize() != 5<<20 {
		t.Fatalf("Connected: %v", c)
	}
	if c := roundTrip(t, Connected("v", 21, 0)); c.GetConnected().MaxMessageSize != nil {
		t.Fatalf("Connected with max 0 sets the field: %v", c)
	}
	e := roundTrip(t, Error(42, pb.ServerError_ServiceNotReady, "try again"))
	if e.GetType() != pb.BaseCommand_ERROR || e.GetError().GetRequestId() != 42 ||
		e.GetError().GetError() != pb.ServerError_ServiceNotReady || e.GetError().GetMessage() != "try again" {
		t.Fatalf("Error: %v", e)
	}
	if p := roundTrip(t, Ping()); p.GetType() != pb.BaseCommand_PING || p.Ping == nil {
		t.Fatalf("Ping: %v", p)
	}
	if p := roundTrip(t, Pong()); p.GetType() != pb.BaseCommand_PONG || p.Pong == nil {
		t.Fatalf("Pong: %v", p)
	}
	// PONG: type 19, field 19 empty.
	b, _ := AppendCommand(nil, Pong())
	if want := unhex(t, "00000009 00000005 0813 9a0100"); !bytes.Equal(b, want) {
		t.Fatalf("Pong frame %x, want %x", b, want)
	}
	if Ping() == Ping() {
		t.Fatal("Ping returns a shared command")
	}
}

// frameCopy is a frame copied out of the Reader's buffer.
type frameCopy struct{ command, payload []byte }

type readResult struct {
	frames []frameCopy
	err    error
}

func readAllFrames(r *Reader) readResult {
	var res readResult
	for {
		f, err := r.ReadFrame()
		if err != nil {
			res.err = err
			return res
		}
		fc := frameCopy{command: bytes.Clone(f.Command)}
		if f.Payload != nil {
			fc.payload = bytes.Clone(f.Payload)
		}
		res.frames = append(res.frames, fc)
	}
}

func equalFrames(a, b readResult) bool {
	if len(a.frames) != len(b.frames) || errClass(a.err) != errClass(b.err) {
		return false
	}
	for i := range a.frames {
		if !bytes.Equal(a.frames[i].command, b.frames[i].command) ||
			!bytes.Equal(a.frames[i].payload, b.frames[i].payload) ||
			(a.frames[i].payload == nil) != (b.frames[i].payload == nil) {
			return false
		}
	}
	return true
}

func errClass(err error) string {
	for _, s := range []error{io.EOF, io.ErrUnexpectedEOF, io.ErrNoProgress, ErrFrameTooLarge, ErrFrameTooSmall,
		ErrBadCommandSize, ErrBadChecksum, ErrBadMagic, ErrMalformed} {
		if errors.Is(err, s) {
			return s.Error()
		}
	}
	if err == nil {
		return "nil"
	}
	return "other: " + err.Error()
}

func TestScan(t *testing.T) {
	client := ClientLimits(1 << 20)
	for _, tt := range []struct {
		name     string
		buf      []byte
		limits   Limits
		span     Span
		complete bool
		err      error
	}{
		{"empty", nil, client, Span{}, false, nil},
		{"partial header", header(20, 10)[:7], client, Span{}, false, nil},
		{"header only", header(20, 10), client, Span{Size: 24, CommandSize: 10}, true, nil},
		{"frame too large", header(1<<20+1, 10), client, Span{}, false, ErrFrameTooLarge},
		{"command over the client cap", header(100<<10, 65<<10), client, Span{}, false, ErrCommandTooLarge},
		{"broker commands are not capped", header(100<<10, 65<<10), Limits{MaxFrame: 1 << 20}, Span{Size: 4 + 100<<10, CommandSize: 65 << 10}, true, nil},
		{"command larger than frame", header(20, 17), client, Span{}, false, ErrBadCommandSize},
		{"too small", header(4, 0), client, Span{}, false, ErrFrameTooSmall},
	} {
		t.Run(tt.name, func(t *testing.T) {
			span, complete, err := tt.limits.Scan(tt.buf)
			if !errors.Is(err, tt.err) || (err == nil) != (tt.err == nil) || span != tt.span || complete != tt.complete {
				t.Fatalf("Scan = %+v, %v, %v; want %+v, %v, %v", span, complete, err, tt.span, tt.complete, tt.err)
			}
		})
	}
}

// ReadCommand reads past a payload without buffering it: a reader of client commands holds
// no more than its largest command, whatever the frames carry.
func TestReadCommandSkipsPayloads(t *testing.T) {
	var stream []byte
	for i := range 3 {
		b, err := AppendPayloadCommand(nil, &pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{
			ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(uint64(i))}}, nil,
			&pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(uint64(i)), PublishTime: proto.Uint64(1)}, make([]byte, 1<<20))
		if err != nil {
			t.Fatal(err)
		}
		stream = append(stream, b...)
	}
	ping, _ := AppendCommand(nil, Ping())
	stream = append(stream, ping...)
	r := ClientLimits(2 << 20).Reader(iotest.OneByteReader(bytes.NewReader(stream)))
	for i := range 3 {
		cmd, err := r.ReadCommand()
		if err != nil || cmd.GetSend().GetSequenceId() != uint64(i) {
			t.Fatalf("command %d: %v, %v", i, cmd, err)
		}
	}
	if cmd, err := r.ReadCommand(); err != nil || cmd.GetType() != pb.BaseCommand_PING {
		t.Fatalf("after the payloads: %v, %v", cmd, err)
	}
	if _, err := r.ReadCommand(); err != io.EOF {
		t.Fatalf("at the end: %v, want io.EOF", err)
	}
	if len(r.buf) > initialBufSize {
		t.Fatalf("the reader grew to %d bytes for commands of a few bytes", len(r.buf))
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string { return "i/o timeout" }
func (timeoutErr) Timeout() bool { return true }

// timingOut gives its data in the given pieces with a time-out between them.
type timingOut struct{ pieces [][]byte }

func (t *timingOut) Read(b []byte) (int, error) {
	if len(t.pieces) == 0 {
		return 0, io.EOF
	}
	p := t.pieces[0]
	if p == nil {
		t.pieces = t.pieces[1:]
		return 0, timeoutErr{}
	}
	n := copy(b, p)
	if t.pieces[0] = p[n:]; len(t.pieces[0]) == 0 {
		t.pieces = t.pieces[1:]
	}
	return n, nil
}

// A keep-alive's read deadline is not the end of the stream: after a time-out, even in the
// middle of a frame or of a payload being skipped, the reader goes on where it stopped.
func TestReaderGoesOnAfterTimeouts(t *testing.T) {
	send, err := AppendPayloadCommand(nil, &pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{
		ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(1)}}, nil,
		&pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(1)}, make([]byte, 10000))
	if err != nil {
		t.Fatal(err)
	}
	ping, _ := AppendCommand(nil, Ping())
	stream := append(append(ping, send...), ping...)
	r := ClientLimits(1 << 20).Reader(&timingOut{pieces: [][]byte{nil, stream[:5], nil, stream[5:40], nil, stream[40:9000], nil, stream[9000:]}})
	var got []pb.BaseCommand_Type
	for len(got) < 3 {
		cmd, err := r.ReadCommand()
		if isTimeout(err) {
			continue
		}
		if err != nil {
			t.Fatalf("after %v: %v", got, err)
		}
		got = append(got, cmd.GetType())
	}
	if got[0] != pb.BaseCommand_PING || got[1] != pb.BaseCommand_SEND || got[2] != pb.BaseCommand_PING {
		t.Fatalf("read %v", got)
	}
}

// TestReserveReadsLarge: a Reader with a reserved buffer takes many frames in one read, and
// keeps what was buffered before.
func TestReserveReadsLarge(t *testing.T) {
	var stream bytes.Buffer
	for range 1000 {
		if err := WriteCommand(&stream, Ping()); err != nil {
			t.Fatal(err)
		}
	}
	cr := &countingReader{r: &stream}
	r := NewReader(cr, 0)
	if _, err := r.ReadFrame(); err != nil {
		t.Fatal(err)
	}
	r.Reserve(64 << 10)
	for i := 1; i < 1000; i++ {
		if _, err := r.ReadFrame(); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
	}
	if cr.reads > 3 {
		t.Fatalf("%d reads for 1000 frames", cr.reads)
	}
}

type countingReader struct {
	r     io.Reader
	reads int
}

func (c *countingReader) Read(p []byte) (int, error) {
	c.reads++
	return c.r.Read(p)
}

// burstStream is a stream that arrives in bursts: each Read returns at most what is left of
// the current burst, and records the room it was given.
type burstStream struct {
	bursts [][]byte
	rooms  []int
}

func (s *burstStream) Read(p []byte) (int, error) {
	s.rooms = append(s.rooms, len(p))
	for len(s.bursts) > 0 && len(s.bursts[0]) == 0 {
		s.bursts = s.bursts[1:]
	}
	if len(s.bursts) == 0 {
		return 0, io.EOF
	}
	n := copy(p, s.bursts[0])
	s.bursts[0] = s.bursts[0][n:]
	return n, nil
}

// pings is n PING frames in one piece.
func pings(t *testing.T, n int) []byte {
	var b []byte
	for range n {
		var err error
		if b, err = AppendCommand(b, Ping()); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// TestReaderReadsInBursts: a Reader that reads in bursts takes a stream's many small frames
// in a few large reads, and waits for the next burst with its small buffer again.
func TestReaderReadsInBursts(t *testing.T) {
	const frames = 20_000 // 200 KB of 10-byte PINGs
	s := &burstStream{bursts: [][]byte{pings(t, frames), pings(t, 1)}}
	r := NewReader(s, 0)
	r.ReadBursts()
	for i := range frames + 1 {
		if _, err := r.ReadFrame(); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
	}
	if len(s.rooms) > 6 {
		t.Fatalf("%d reads for %d frames (rooms %v)", len(s.rooms), frames, s.rooms)
	}
	// The read after the first burst's short one is given the small buffer.
	last := s.rooms[len(s.rooms)-1]
	if last > initialBufSize {
		t.Fatalf("the second burst was read into %d bytes (rooms %v)", last, s.rooms)
	}
	if _, err := r.ReadFrame(); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
	if cap(r.buf) != initialBufSize {
		t.Fatalf("waiting for more with a buffer of %d bytes", cap(r.buf))
	}

	// Without bursts, the small buffer takes a read per few frames.
	s = &burstStream{bursts: [][]byte{pings(t, frames)}}
	r = NewReader(s, 0)
	for range frames {
		if _, err := r.ReadFrame(); err != nil {
			t.Fatal(err)
		}
	}
	if len(s.rooms) < frames/initialBufSize {
		t.Fatalf("%d reads without bursts", len(s.rooms))
	}
}

// frameBursts returns one frame over reads of at most 64 KiB each, over and over.
type frameBursts struct {
	frame []byte
	off   int
}

func (f *frameBursts) Read(p []byte) (int, error) {
	n := copy(p[:min(len(p), 64<<10)], f.frame[f.off:])
	f.off = (f.off + n) % len(f.frame)
	return n, nil
}

// TestReaderLargeFramesSteadyStateAllocs: a Reader that reads in bursts grows its buffer for
// a large frame, and gives it back when it is released (a multiplexed session parked
// between messages); the buffers come from a pool, so a client that sends a 1 MiB message
// now and then costs no allocation per message (each was a new megabyte or two for the
// collector to clear: 9,000 such clients spent a third of the proxy's CPU in it).
func TestReaderLargeFramesSteadyStateAllocs(t *testing.T) {
	fr, err := AppendPayloadCommand(nil, goldens[2].cmd, nil, testMetadata, make([]byte, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	r := NewReader(&frameBursts{frame: fr}, 0)
	r.ReadBursts()
	allocs := testing.AllocsPerRun(50, func() {
		f, err := r.ReadFrame()
		if err != nil || len(f.Payload) < 1<<20 {
			t.Fatalf("ReadFrame: %v", err)
		}
		r.Release()
		if r.buf != nil || r.large != nil {
			t.Fatal("a released reader still holds its buffer")
		}
	})
	t.Logf("%v allocations per 1 MiB frame", allocs)
	if poolsKeep && allocs > 0.5 {
		t.Fatalf("ReadFrame allocates %v times per 1 MiB frame", allocs)
	}
}

// stallAfter hands out its bytes (at most what each read asks for), then times out, as a
// client that stops in the middle of a frame under a read deadline.
type stallAfter struct{ b []byte }

func (s *stallAfter) Read(p []byte) (int, error) {
	if len(s.b) == 0 {
		return 0, timeoutErr{}
	}
	n := copy(p, s.b)
	s.b = s.b[n:]
	return n, nil
}

// TestReaderShrinkKeepsWhatArrived: a reader in bursts that took a burst's buffer (its first
// read was full) and then waits in the middle of a frame holds, once shrunk, a buffer that
// fits what arrived, and reads the frame's rest on.
func TestReaderShrinkKeepsWhatArrived(t *testing.T) {
	head := make([]byte, 512) // a 1,004-byte frame announced, 512 bytes of it sent
	binary.BigEndian.PutUint32(head, 1000)
	binary.BigEndian.PutUint32(head[4:], 2)
	copy(head[8:], []byte{0x08, 0x12})
	s := &stallAfter{b: head}
	r := NewReader(s, 0)
	r.ReadBursts()
	if _, err := r.ReadFrame(); !isTimeout(err) {
		t.Fatalf("got %v, want the stall's time-out", err)
	}
	if cap(r.buf) != burstBufSize {
		t.Fatalf("the full first read led to a buffer of %d bytes, want the burst's (the case shrinking is for)", cap(r.buf))
	}
	r.Shrink()
	if len(r.Buffered()) != 512 || cap(r.buf) > 512 {
		t.Fatalf("shrunk: %d bytes buffered in a buffer of %d", len(r.Buffered()), cap(r.buf))
	}
	s.b = make([]byte, 492)
	if f, err := r.ReadFrame(); err != nil || len(f.Command) != 2 {
		t.Fatalf("the frame's rest: %v", err)
	}
}

// TestReaderTakeLarge: a large frame's buffer is handed over with the frame in it; the
// reader goes on in a buffer of its own with what it read beyond the frame (the next frames
// read whole and right), writes nothing more into the taken buffer, keeps a small frame in
// its own buffer, and a reader with a reserved size gets that size again.
func TestReaderTakeLarge(t *testing.T) {
	frameOf := func(fill byte, size int) []byte {
		fr, err := AppendPayloadCommand(nil, goldens[2].cmd, nil, testMetadata, bytes.Repeat([]byte{fill}, size))
		if err != nil {
			t.Fatal(err)
		}
		return fr
	}
	var stream []byte
	for _, f := range [][]byte{frameOf('a', 200<<10), frameOf('b', 100), frameOf('c', 300<<10), frameOf('d', 100)} {
		stream = append(stream, f...)
	}
	for _, reserve := range []int{0, 256 << 10} {
		r := NewReader(bytes.NewReader(stream), 0)
		if reserve > 0 {
			r.Reserve(reserve)
		}
		var taken []*Buffer
		var payloads [][]byte
		for _, fill := range []byte{'a', 'b', 'c', 'd'} {
			f, err := r.ReadFrame()
			if err != nil {
				t.Fatal(err)
			}
			b := r.TakeLarge()
			if large := fill == 'a' || fill == 'c'; (b != nil) != large {
				t.Fatalf("reserve %d: frame %c taken: %v", reserve, fill, b != nil)
			}
			if b != nil {
				if !aliases(b.B, f.Payload) {
					t.Fatalf("reserve %d: frame %c's payload is not in the taken buffer", reserve, fill)
				}
				taken = append(taken, b)
				if len(r.buf) < reserve {
					t.Errorf("reserve %d: the reader goes on in %d bytes", reserve, len(r.buf))
				}
			}
			if b == nil && !bytes.HasSuffix(f.Payload, bytes.Repeat([]byte{fill}, 100)) {
				t.Errorf("reserve %d: frame %c read as %q", reserve, fill, f.Payload)
			}
			payloads = append(payloads, f.Payload)
		}
		for i, n := range []int{200 << 10, 300 << 10} {
			fill := "ac"[i]
			if !bytes.HasSuffix(payloads[2*i], bytes.Repeat([]byte{fill}, n)) {
				t.Errorf("reserve %d: frame %c's payload changed after the reads that followed", reserve, fill)
			}
		}
		if taken[0] == taken[1] {
			t.Errorf("reserve %d: the same buffer handed over twice", reserve)
		}
		for _, b := range taken {
			b.Put()
		}
	}
}

// aliases reports whether part lies within whole's memory.
func aliases(whole, part []byte) bool {
	if len(part) == 0 || len(whole) == 0 {
		return false
	}
	w, p := uintptr(unsafe.Pointer(&whole[0])), uintptr(unsafe.Pointer(&part[0]))
	return p >= w && p+uintptr(len(part)) <= w+uintptr(cap(whole))
}

// TestReaderTakeLargeSteadyStateAllocs: a stream of 1 MiB frames, each handed over and put
// back by its taker, is read without an allocation per frame (pooled buffers both ways).
func TestReaderTakeLargeSteadyStateAllocs(t *testing.T) {
	fr, err := AppendPayloadCommand(nil, goldens[2].cmd, nil, testMetadata, make([]byte, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	r := NewReader(&frameBursts{frame: fr}, 0)
	r.ReadBursts()
	allocs := testing.AllocsPerRun(50, func() {
		f, err := r.ReadFrame()
		if err != nil || len(f.Payload) < 1<<20 {
			t.Fatalf("ReadFrame: %v", err)
		}
		b := r.TakeLarge()
		if b == nil {
			t.Fatal("a 1 MiB frame was not handed over")
		}
		b.Put()
	})
	t.Logf("%v allocations per 1 MiB frame", allocs)
	if poolsKeep && allocs > 0.5 {
		t.Fatalf("ReadFrame and TakeLarge allocate %v times per 1 MiB frame", allocs)
	}
}
