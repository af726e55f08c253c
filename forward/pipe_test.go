package forward

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/frames"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/loopback"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/wait"
)

// runPipe forwards from one TCP pair to another through a pipe: the test writes into in and
// reads from out. The returned channel yields the pipe's result.
func runPipe(t *testing.T, buffers *Buffers, filter func(p *Pipe) Filter) (in, out net.Conn, p *Pipe, done <-chan error) {
	t.Helper()
	in, srcConn := loopback.Pair(t)
	dstConn, out := loopback.Pair(t)
	p = New(Config{Src: srcConn, Dst: NewSink(dstConn, nil), Limits: frame.ClientLimits(frame.DefaultMaxFrameSize), Buffers: buffers,
		Frames: prometheus.NewCounter(prometheus.CounterOpts{Name: "f"}), Bytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "b"})})
	if filter != nil {
		p.filter = filter(p)
	}
	errc := make(chan error, 1)
	go func() {
		err := p.Run()
		dstConn.(*net.TCPConn).CloseWrite()
		errc <- err
	}()
	return in, out, p, errc
}

func commandFrame(t *testing.T, cmd *pb.BaseCommand) []byte {
	t.Helper()
	b, err := frame.AppendCommand(nil, cmd)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// writeSplit writes b in pieces of the given sizes (cycled), so frames arrive split at
// every kind of boundary.
func writeSplit(t *testing.T, c net.Conn, b []byte, pieces ...int) {
	for i := 0; len(b) > 0; i++ {
		n := min(pieces[i%len(pieces)], len(b))
		if _, err := c.Write(b[:n]); err != nil {
			t.Error(err)
			return
		}
		b = b[n:]
		time.Sleep(time.Millisecond)
	}
}

// refusingProducers is a filter that notes every command it sees and refuses PRODUCER,
// telling the far side with a PING (what came before must already be there).
func refusingProducers(p *Pipe, seen *[]pb.BaseCommand_Type) Filter {
	return func(typ pb.BaseCommand_Type, cmd []byte) Verdict {
		*seen = append(*seen, typ)
		if typ == pb.BaseCommand_PRODUCER {
			p.dst.Inject(frame.Ping())
			return Drop
		}
		return Pass
	}
}

// producerFrame is a PRODUCER frame with a body of n bytes after its command (which a
// filter, looking only at commands, must skip).
func producerFrame(t *testing.T, n int) []byte {
	f := commandFrame(t, &pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{
		Topic: proto.String("persistent://t/n/x"), ProducerId: proto.Uint64(1), RequestId: proto.Uint64(1)}})
	f = append(f, make([]byte, n)...)
	total := len(f) - 4
	f[0], f[1], f[2], f[3] = byte(total>>24), byte(total>>16), byte(total>>8), byte(total)
	return f
}

func TestPipeForwardsEveryByteAcrossSplitsAndSizes(t *testing.T) {
	in, out, p, done := runPipe(t, NewBuffers(), nil)
	var stream []byte
	for i, size := range []int{0, 1, 100, 3000, 4 << 10, 15 << 10, 40 << 10, 64 << 10, 200 << 10, 10, 1 << 20, 7} {
		stream = append(stream, frames.Send(t, size, uint64(i))...)
	}
	go func() {
		writeSplit(t, in, stream, 1, 7, 8, 9, 4095, 65536, 3, 100000)
		in.(*net.TCPConn).CloseWrite()
	}()
	got, err := io.ReadAll(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, stream) {
		t.Fatalf("forwarded %d bytes, sent %d; content equal=%v", len(got), len(stream), bytes.Equal(got, stream))
	}
	if err := <-done; !errors.Is(err, io.EOF) {
		t.Fatalf("pipe ended with %v, want io.EOF", err)
	}
	if p.totalFrames != 12 || p.totalBytes.Load() != uint64(len(stream)) {
		t.Fatalf("counted %d frames, %d bytes; want 12, %d", p.totalFrames, p.totalBytes.Load(), len(stream))
	}
	if p.buf.bytes() != nil {
		t.Fatal("pipe kept its buffer after it ended")
	}
}

// The same stream with a filter that looks at every command, and with one that watches only
// PRODUCER (the others then stay in the write batch and the filter never sees them).
func TestPipeFilterDropsFramesAndInjectsInOrder(t *testing.T) {
	producerOnly := func(typ pb.BaseCommand_Type) bool { return typ == pb.BaseCommand_PRODUCER }
	t.Run("all commands", func(t *testing.T) {
		testPipeFilter(t, nil, []pb.BaseCommand_Type{pb.BaseCommand_SEND, pb.BaseCommand_PRODUCER, pb.BaseCommand_SEND, pb.BaseCommand_PRODUCER, pb.BaseCommand_SEND})
	})
	t.Run("watched commands", func(t *testing.T) {
		testPipeFilter(t, producerOnly, []pb.BaseCommand_Type{pb.BaseCommand_PRODUCER, pb.BaseCommand_PRODUCER})
	})
}

func testPipeFilter(t *testing.T, watch func(pb.BaseCommand_Type) bool, wantSeen []pb.BaseCommand_Type) {
	ping := commandFrame(t, frame.Ping())
	var seen []pb.BaseCommand_Type
	in, out, p, done := runPipe(t, NewBuffers(), func(p *Pipe) Filter {
		p.watch = watch
		return refusingProducers(p, &seen)
	})
	// A refused PRODUCER small enough to be buffered, then a refused frame with a 300 KiB body
	// (the filter only looks at commands; the body must be skipped from the socket).
	producer, bigRefused := producerFrame(t, 0), producerFrame(t, 300<<10)

	a, b, c := frames.Send(t, 10, 1), frames.Send(t, 50<<10, 2), frames.Send(t, 20, 3)
	var stream []byte
	for _, f := range [][]byte{a, producer, b, bigRefused, c} {
		stream = append(stream, f...)
	}
	go func() {
		writeSplit(t, in, stream, 5000, 3, 70000)
		in.(*net.TCPConn).CloseWrite()
	}()
	got, err := io.ReadAll(out)
	if err != nil {
		t.Fatal(err)
	}
	var want []byte
	for _, f := range [][]byte{a, ping, b, ping, c} {
		want = append(want, f...)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("got %d bytes, want %d (frames in order, refused ones replaced by the injected PING)", len(got), len(want))
	}
	if err := <-done; !errors.Is(err, io.EOF) {
		t.Fatalf("pipe ended with %v, want io.EOF", err)
	}
	if len(seen) != len(wantSeen) {
		t.Fatalf("filter saw %v, want each frame once: %v", seen, wantSeen)
	}
	for i := range seen {
		if seen[i] != wantSeen[i] {
			t.Fatalf("filter saw %v, want %v", seen, wantSeen)
		}
	}
	if p.totalFrames != 3 {
		t.Fatalf("counted %d frames, want the 3 forwarded", p.totalFrames)
	}
}

// While big frames come, the pipe reads only their heads and splices the rest: the filter
// still sees every command (a refused big frame is skipped from the socket), small frames
// between them are batched as before, and most bytes never enter user space.
func TestPipeSplicesTheRestOfBigFrames(t *testing.T) {
	var seen []pb.BaseCommand_Type
	in, out, p, done := runPipe(t, NewBuffers(), func(p *Pipe) Filter { return refusingProducers(p, &seen) })
	refused := producerFrame(t, 20<<10)

	var stream, want []byte
	var wantSeen []pb.BaseCommand_Type
	add := func(f []byte, typ pb.BaseCommand_Type, forwarded []byte) {
		stream = append(stream, f...)
		want = append(want, forwarded...)
		wantSeen = append(wantSeen, typ)
	}
	ping := commandFrame(t, frame.Ping())
	for i := range 40 {
		var f []byte
		switch i % 8 {
		case 3:
			f = frames.Send(t, 10, uint64(i)) // small frames between big ones
		case 5:
			add(refused, pb.BaseCommand_PRODUCER, ping)
			continue
		case 6:
			f = frames.Send(t, 40<<10, uint64(i)) // big, yet fits a read buffer
		default:
			f = frames.Send(t, 64<<10+i*1000, uint64(i))
		}
		add(f, pb.BaseCommand_SEND, f)
	}
	go func() {
		writeSplit(t, in, stream, 1<<20)
		in.(*net.TCPConn).CloseWrite()
	}()
	got, err := io.ReadAll(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("got %d bytes, want %d (frames in order, refused ones replaced by the injected PING)", len(got), len(want))
	}
	if err := <-done; !errors.Is(err, io.EOF) {
		t.Fatalf("pipe ended with %v, want io.EOF", err)
	}
	if len(seen) != len(wantSeen) {
		t.Fatalf("filter saw %d commands, want each of the %d frames once", len(seen), len(wantSeen))
	}
	for i := range seen {
		if seen[i] != wantSeen[i] {
			t.Fatalf("filter saw %v at frame %d, want %v", seen[i], i, wantSeen[i])
		}
	}
	forwarded := p.totalBytes.Load()
	// Heads, the refused frames and the first big frame after a small one (read whole, as
	// any frame after small ones is) are about a quarter; copied, it would be all.
	if p.readBytes > forwarded/3 {
		t.Fatalf("%d of the %d bytes forwarded went through user space; the rest of big frames should be spliced", p.readBytes, forwarded)
	}
	t.Logf("%d of %d bytes forwarded went through user space", p.readBytes, forwarded)
}

// After a big frame has put the pipe into head reads, a frame that is all command (no
// payload) and bigger than a head must still be held until the filter has seen it: its
// bytes are not streamed before. Upstream that is a PRODUCER padded past 16 KiB; downstream a
// topic list the policy filters.
func TestPipeFiltersBigCommandsAfterBigFrames(t *testing.T) {
	for _, c := range []struct {
		name   string
		refuse pb.BaseCommand_Type
		limits frame.Limits
		frame  func(t *testing.T) []byte
		secret string
	}{
		{"a padded PRODUCER from a client", pb.BaseCommand_PRODUCER, frame.ClientLimits(frame.DefaultMaxFrameSize), func(t *testing.T) []byte {
			return commandFrame(t, &pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{
				Topic: proto.String("persistent://t/n/forbidden"), ProducerId: proto.Uint64(1), RequestId: proto.Uint64(1),
				ProducerName: proto.String(strings.Repeat("x", 20<<10))}})
		}, "t/n/forbidden"},
		{"a topic list from a broker", pb.BaseCommand_GET_TOPICS_OF_NAMESPACE_RESPONSE, frame.Limits{MaxFrame: frame.DefaultMaxFrameSize}, func(t *testing.T) []byte {
			topics := make([]string, 400)
			for i := range topics {
				topics[i] = fmt.Sprintf("persistent://t/secret/topic-%03d-%s", i, strings.Repeat("s", 40))
			}
			return commandFrame(t, &pb.BaseCommand{Type: pb.BaseCommand_GET_TOPICS_OF_NAMESPACE_RESPONSE.Enum(),
				GetTopicsOfNamespaceResponse: &pb.CommandGetTopicsOfNamespaceResponse{RequestId: proto.Uint64(7), Topics: topics}})
		}, "t/secret/"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var seen []pb.BaseCommand_Type
			in, out, _, done := runPipe(t, NewBuffers(), func(p *Pipe) Filter {
				p.limits = c.limits
				return func(typ pb.BaseCommand_Type, cmd []byte) Verdict {
					seen = append(seen, typ)
					if typ == c.refuse {
						p.dst.Inject(frame.Ping())
						return Drop
					}
					return Pass
				}
			})
			big, refused := frames.Send(t, 100<<10, 1), c.frame(t) // big: streamed, so head reads begin
			if len(refused) < 17<<10 {
				t.Fatalf("the refused frame is %d bytes; it must be longer than a head and the splice threshold", len(refused))
			}
			go func() {
				writeSplit(t, in, append(append([]byte(nil), big...), refused...), 1<<20)
				in.(*net.TCPConn).CloseWrite()
			}()
			got, err := io.ReadAll(out)
			if err != nil {
				t.Fatal(err)
			}
			<-done
			if bytes.Contains(got, []byte(c.secret)) || len(seen) != 2 || seen[1] != c.refuse {
				t.Fatalf("filter saw %v; %q reached the far side: %v (want it refused, seen by the filter)", seen, c.secret, bytes.Contains(got, []byte(c.secret)))
			}
			if want := append(append([]byte(nil), big...), commandFrame(t, frame.Ping())...); !bytes.Equal(got, want) {
				t.Fatalf("forwarded %d bytes, want the big frame and the injected PING (%d)", len(got), len(want))
			}
		})
	}
}

// While the rest of a big frame is spliced and the far side stops reading, the stall
// watchdog blames the far side (its not-reading mark), not the sender (whose clock runs only
// while the pipe waits for it).
func TestPipeStallDuringSplicedRestBlamesTheReader(t *testing.T) {
	var sender, reader Mark
	in, _, p, _ := runPipe(t, NewBuffers(), func(p *Pipe) Filter {
		p.partial, p.dst.notRead = &sender, &reader
		return refusingProducers(p, new([]pb.BaseCommand_Type))
	})
	p.dst.conn.(*net.TCPConn).SetWriteBuffer(16 << 10)
	go func() {
		// Two big frames: the first turns head reads on, the second's rest is spliced into a
		// far side that never reads.
		in.SetWriteDeadline(time.Now().Add(10 * time.Second))
		in.Write(append(frames.Send(t, 100<<10, 1), frames.Send(t, 4<<20, 2)...))
	}()
	wait.Until(t, 10*time.Second, "the far side's not-reading mark to hold for 300 ms", func() bool {
		return reader.StuckFor(time.Now()) >= 300*time.Millisecond
	})
	// The sender's clock stopped as the pipe began to write: it is not the one to blame.
	if stuck := sender.StuckFor(time.Now()); stuck >= 250*time.Millisecond {
		t.Fatalf("the sender's mark holds %v while the reader's holds %v: the sender would be blamed", stuck, reader.StuckFor(time.Now()))
	}
}

func TestPipeHoldsNoBufferWhileIdle(t *testing.T) {
	buffers := NewBuffers()
	in, out, _, done := runPipe(t, buffers, nil)
	waitHeld := func(what string, ok func(int64) bool) {
		t.Helper()
		if !wait.Within(5*time.Second, func() bool { return ok(buffers.reads.held.Load()) }) {
			t.Fatalf("%s: pipe holds %d buffer bytes", what, buffers.reads.held.Load())
		}
	}
	f := frames.Send(t, 2000, 1)
	for range 3 {
		if _, err := in.Write(f); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(f))
		if _, err := io.ReadFull(out, got); err != nil {
			t.Fatal(err)
		}
	}
	waitHeld("idle after whole frames", func(n int64) bool { return n == 0 })
	// Half a frame has to wait in a buffer for its rest; once it is whole, the buffer goes back.
	if _, err := in.Write(f[:1000]); err != nil {
		t.Fatal(err)
	}
	waitHeld("half a frame received", func(n int64) bool { return n > 0 })
	if _, err := in.Write(f[1000:]); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(f))
	if _, err := io.ReadFull(out, got); err != nil || !bytes.Equal(got, f) {
		t.Fatalf("frame after a pause: %v", err)
	}
	waitHeld("idle again", func(n int64) bool { return n == 0 })
	in.(*net.TCPConn).CloseWrite()
	if err := <-done; !errors.Is(err, io.EOF) {
		t.Fatalf("pipe ended with %v", err)
	}
}

// A receiver that stops reading stops the sender: the pipe blocks in its write and stops
// reading, so what it holds stays one buffer however much the sender tries to push.
func TestPipeBackpressureBoundsMemory(t *testing.T) {
	buffers := NewBuffers()
	in, out, _, done := runPipe(t, buffers, nil)
	f := frames.Send(t, 1000, 1)
	const total = 64 << 20 // far more than the kernel buffers of the two connections
	var stream []byte
	for len(stream) < total {
		stream = append(stream, f...)
	}
	// Nobody reads out: the sender must end up blocked, with the pipe holding one buffer.
	sent := writeUntilBlocked(t, in, stream)
	if held := buffers.reads.held.Load(); held > largeBufferSize {
		t.Fatalf("pipe holds %d buffer bytes while its receiver is stalled, want at most one buffer", held)
	}
	got, err := readWhileWriting(t, in, out, stream[sent:])
	if err != nil || !bytes.Equal(got, stream) {
		t.Fatalf("after the stall: %d bytes of %d, err %v", len(got), len(stream), err)
	}
	if err := <-done; !errors.Is(err, io.EOF) {
		t.Fatalf("pipe ended with %v", err)
	}
}

// writeUntilBlocked writes stream to c until a write makes no progress for a second (the
// blocked state backpressure must lead to; a slow machine cannot fake it), and returns how
// much was written. Writing it all means nothing pushed back: the test fails.
func writeUntilBlocked(t *testing.T, c net.Conn, stream []byte) int {
	t.Helper()
	sent := 0
	for sent < len(stream) {
		c.SetWriteDeadline(time.Now().Add(time.Second))
		n, err := c.Write(stream[sent:min(len(stream), sent+256<<10)])
		sent += n
		if isTimeout(err) {
			c.SetWriteDeadline(time.Time{})
			t.Logf("sender blocked after %d KiB", sent>>10)
			return sent
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Fatalf("the sender wrote all %d bytes with nobody reading: no backpressure", len(stream))
	return sent
}

// readWhileWriting writes rest to in, half-closes it, and returns all that comes out.
func readWhileWriting(t *testing.T, in, out net.Conn, rest []byte) ([]byte, error) {
	t.Helper()
	go func() {
		if _, err := in.Write(rest); err != nil {
			t.Error(err)
		}
		in.(*net.TCPConn).CloseWrite()
	}()
	return io.ReadAll(out)
}
