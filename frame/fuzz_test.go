package frame

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"

	"google.golang.org/protobuf/proto"
)

// fuzzMaxFrameSize keeps the fuzzer's buffers small while still letting it
// reach the too-large path with short inputs.
const fuzzMaxFrameSize = 1 << 16

// FuzzReadFrame reads the input as a stream of frames in one delivery and
// again split into two reads at sampled points (see splitPoints): every delivery must
// give the same frames and the same class of error. Each frame is also run
// through PeekType, Decode and ParsePayload, which must not panic and must
// agree with each other.
func FuzzReadFrame(f *testing.F) {
	for _, g := range goldens {
		b, err := g.encode(nil)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add(header(0, 0))
	f.Add(header(0xFFFFFFFF, 1))
	f.Add(append(header(9, 6), 0x08, 0x12, 0x92, 0x01, 0x00))

	f.Fuzz(func(t *testing.T, data []byte) {
		want := readAllFrames(NewReader(bytes.NewReader(data), fuzzMaxFrameSize))
		if want.err == nil {
			t.Fatal("reading ended without an error")
		}
		if errClass(want.err) == "other: "+want.err.Error() {
			t.Fatalf("unexpected error from a byte stream: %v", want.err)
		}
		for _, fr := range want.frames {
			checkFrame(t, fr)
		}
		checkReadCommand(t, data, want)
		for _, i := range splitPoints(data) {
			in := io.MultiReader(bytes.NewReader(data[:i]), bytes.NewReader(data[i:]))
			got := readAllFrames(NewReader(in, fuzzMaxFrameSize))
			if !equalFrames(got, want) {
				t.Fatalf("split at %d: %d frames, %v; in one read: %d frames, %v",
					i, len(got.frames), got.err, len(want.frames), want.err)
			}
		}
	})
}

func checkFrame(t *testing.T, fr frameCopy) {
	t.Helper()
	if len(fr.command) == 0 {
		t.Fatal("empty command")
	}
	typ, peekErr := PeekType(fr.command)
	cmd, decErr := Decode(fr.command)
	if decErr == nil && peekErr == nil {
		if typ != cmd.GetType() {
			t.Fatalf("Decode says type %v, PeekType %v, %v", cmd.GetType(), typ, peekErr)
		}
		// A decoded command encodes again, and that frame reads back.
		b, err := AppendCommand(nil, cmd)
		if err != nil {
			t.Fatalf("re-encoding a decoded command: %v", err)
		}
		if _, _, err := ParseHeader(b, 0); err != nil {
			t.Fatalf("re-encoded header: %v", err)
		}
	}
	if decErr != nil && !errors.Is(decErr, ErrMalformed) {
		t.Fatalf("Decode error not ErrMalformed: %v", decErr)
	}
	if peekErr != nil && !errors.Is(peekErr, ErrMalformed) {
		t.Fatalf("PeekType error not ErrMalformed: %v", peekErr)
	}
	if fr.payload != nil {
		p, err := ParsePayload(fr.payload)
		if err == nil {
			if Checksum(fr.payload[len(fr.payload)-len(p.Data)-len(p.Metadata)-4:]) != p.Checksum {
				t.Fatal("ParsePayload accepted a wrong checksum")
			}
		} else if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrBadMagic) && !errors.Is(err, ErrBadChecksum) {
			t.Fatalf("ParsePayload error of unexpected class: %v", err)
		}
	}
}

// splitPoints are the places where FuzzReadFrame splits its input: every place for short
// inputs, else the first and last 16 and 32 spread over the rest. Trying every place of a
// long input costs the square of its length and stalls the fuzzer.
func splitPoints(data []byte) []int {
	n := len(data)
	if n <= 64 {
		points := make([]int, n+1)
		for i := range points {
			points[i] = i
		}
		return points
	}
	var points []int
	for i := 0; i <= 16; i++ {
		points = append(points, i, n-i)
	}
	step := n / 32
	for i := step; i < n; i += step {
		points = append(points, min(n, i+int(data[i])%step))
	}
	return points
}

// checkReadCommand reads the same stream with ReadCommand, split into one-byte reads: it
// must give each frame's decoded command until the first that does not decode, then fail.
func checkReadCommand(t *testing.T, data []byte, want readResult) {
	t.Helper()
	r := Limits{MaxFrame: fuzzMaxFrameSize}.Reader(iotest.OneByteReader(bytes.NewReader(data)))
	for _, fr := range want.frames {
		wantCmd, decErr := Decode(fr.command)
		got, err := r.ReadCommand()
		if decErr != nil {
			if err == nil {
				t.Fatalf("ReadCommand decoded %v; Decode says %v", got, decErr)
			}
			return
		}
		if err != nil || !proto.Equal(got, wantCmd) {
			t.Fatalf("ReadCommand = %v, %v; want %v", got, err, wantCmd)
		}
	}
	// A truncated last frame whose command is there but does not decode is ErrMalformed to
	// ReadCommand, which decodes before it has the payload.
	if _, err := r.ReadCommand(); errClass(err) != errClass(want.err) && !errors.Is(err, ErrMalformed) {
		t.Fatalf("ReadCommand ends with %v, ReadFrame with %v", err, want.err)
	}
}
