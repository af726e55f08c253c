package session

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/wait"
)

func splicePipesHeld() int {
	splicePipes.Lock()
	defer splicePipes.Unlock()
	return splicePipes.held
}

// runPassthrough is runPipe for an unframed pipe; readAhead plays bytes the handshake read
// past CONNECT.
func runPassthrough(t *testing.T, readAhead []byte) (in, out net.Conn, p *pipe, done <-chan error) {
	t.Helper()
	in, srcConn := tcpPair(t)
	dstConn, out := tcpPair(t)
	src := newWire(srcConn, frame.ClientLimits(frame.DefaultMaxFrameSize))
	if len(readAhead) > 0 {
		// The handshake's reader read a PING, and readAhead behind it, in one read.
		src.r = frame.Limits{}.Reader(bytes.NewReader(append(commandFrame(t, frame.Ping()), readAhead...)))
		if cmd, err := src.readCommand(); err != nil || cmd.GetType() != pb.BaseCommand_PING || !bytes.Equal(src.r.Buffered(), readAhead) {
			t.Fatalf("setting up the read-ahead: %v, %v", cmd, err)
		}
	}
	p = &pipe{src: src, dst: newSink(dstConn), buffers: newBufferPools(), unframed: true,
		frames: prometheus.NewCounter(prometheus.CounterOpts{Name: "f"}), bytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "b"})}
	errc := make(chan error, 1)
	go func() {
		err := p.run()
		dstConn.(*net.TCPConn).CloseWrite()
		errc <- err
	}()
	return in, out, p, errc
}

func waitPipesHeld(t *testing.T, what string, want int) {
	t.Helper()
	if !wait.Within(5*time.Second, func() bool { return splicePipesHeld() == want }) {
		t.Fatalf("%s: %d splice pipes held, want %d", what, splicePipesHeld(), want)
	}
}

// Bytes read ahead go first, then the stream follows byte for byte whatever its size; an
// idle direction holds no pipe and no buffer; the end of the source ends the pipe with EOF.
func TestPassthroughForwardsTheStream(t *testing.T) {
	head := []byte("read ahead by the handshake")
	in, out, p, done := runPassthrough(t, head)
	got := make([]byte, len(head))
	if _, err := io.ReadFull(out, got); err != nil || !bytes.Equal(got, head) {
		t.Fatalf("read-ahead: %q %v", got, err)
	}
	var all []byte
	for _, size := range []int{1, 1000, 70 << 10, 3 << 20} {
		chunk := make([]byte, size)
		rand.Read(chunk)
		all = append(all, chunk...)
		go in.Write(chunk)
		got := make([]byte, size)
		if _, err := io.ReadFull(out, got); err != nil || !bytes.Equal(got, chunk) {
			t.Fatalf("%d bytes: changed on the way, err %v", size, err)
		}
		waitPipesHeld(t, "idle", 0)
	}
	if held := p.buffers.held.Load(); held != 0 {
		t.Fatalf("passthrough took %d buffer bytes", held)
	}
	in.(*net.TCPConn).CloseWrite()
	if err := <-done; !errors.Is(err, io.EOF) {
		t.Fatalf("pipe ended with %v", err)
	}
	if want := float64(len(head) + len(all)); testutil.ToFloat64(p.bytes) != want {
		t.Fatalf("bytes counted %v, want %v", testutil.ToFloat64(p.bytes), want)
	}
}

// A receiver that stops reading stops the sender; the pipe holds one kernel pipe meanwhile.
func TestPassthroughBackpressure(t *testing.T) {
	in, out, _, done := runPassthrough(t, nil)
	stream := make([]byte, 64<<20)
	rand.Read(stream)
	sent := writeUntilBlocked(t, in, stream)
	if held := splicePipesHeld(); held > 1 {
		t.Fatalf("%d pipes held by one stalled direction", held)
	}
	got, err := readWhileWriting(t, in, out, stream[sent:])
	if err != nil || !bytes.Equal(got, stream) {
		t.Fatalf("after the stall: %d bytes of %d, err %v", len(got), len(stream), err)
	}
	if err := <-done; !errors.Is(err, io.EOF) {
		t.Fatalf("pipe ended with %v", err)
	}
	waitPipesHeld(t, "after the end", 0)
}

// A direct session without security forwards unframed when Passthrough is on: frames
// pipelined behind CONNECT and a large one arrive intact, bytes are counted, frames are not
// (nothing reads them), and a half-close reaches the broker.
func TestDirectModePassthrough(t *testing.T) {
	b, _, _ := fakeBroker(t)
	cfg := testConfig()
	cfg.Passthrough = true
	addr, m := startProxy(t, cfg, nil, oneTarget{b})
	p := dialPeer(t, addr)
	send := &pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(1)}}
	md := &pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(1)}
	payload := make([]byte, 2<<20)
	rand.Read(payload)
	big, err := frame.AppendPayloadCommand(nil, send, nil, md, payload)
	if err != nil {
		t.Fatal(err)
	}
	connect, err := frame.AppendCommand(nil, connectCmd(func(c *pb.CommandConnect) { c.ProxyToBrokerUrl = proto.String(b.Addr()) }))
	if err != nil {
		t.Fatal(err)
	}
	small, _ := frame.AppendCommand(nil, frame.Ping())
	if _, err := p.c.Write(append(append(connect, small...), big...)); err != nil {
		t.Fatal(err)
	}
	if got := p.recv(); got.GetType() != pb.BaseCommand_CONNECTED {
		t.Fatalf("client got %v, want CONNECTED", got)
	}
	// The fake broker echoes every frame.
	if got := p.recv(); got.GetType() != pb.BaseCommand_PING {
		t.Fatalf("first frame behind CONNECT came back as %v", got)
	}
	if f, err := p.r.ReadFrame(); err != nil || !bytes.HasSuffix(f.Payload, payload) {
		t.Fatalf("the 2 MiB frame behind it: err %v", err)
	}
	p.c.(*net.TCPConn).CloseWrite()
	p.expectClosed()
	waitCounter(t, m.closes.WithLabelValues(string(ReasonClientClosed)), 1)
	waitCounter(t, m.bytes.WithLabelValues(toBroker), float64(len(small)+len(big)))
	if f := testutil.ToFloat64(m.frames.WithLabelValues(toBroker)); f != 0 {
		t.Fatalf("%v frames counted on an unframed direction", f)
	}
}

// emptySplicePool closes the pool's free pipes once no session holds one, so that a test
// starts from no pipe open.
func emptySplicePool(t *testing.T) {
	t.Helper()
	waitPipesHeld(t, "before the test", 0)
	splicePipes.Lock()
	free := splicePipes.free
	splicePipes.free = nil
	for _, sp := range free {
		sp.forget()
	}
	grown, refused := splicePipes.grown, splicePipes.refused
	splicePipes.Unlock()
	for _, sp := range free {
		sp.close()
	}
	if grown != 0 || refused {
		t.Fatalf("with no pipe open, %d counted as grown (kernel refused growing: %v)", grown, refused)
	}
}

func takeSplicePipes(t *testing.T, n int) (grown, plain []*splicePipe) {
	t.Helper()
	for range n {
		sp, err := getSplicePipe()
		if err != nil {
			t.Fatal(err)
		}
		if sp.grown {
			grown = append(grown, sp)
		} else {
			plain = append(plain, sp)
		}
	}
	return grown, plain
}

// A grown pipe holds splicePipeSize and records what the kernel gave it (fill asks no more
// of one splice than that); past maxGrownPipes, pipes keep the kernel's size. This needs a
// kernel that lets the user grow pipes (pipe-max-size, pipe-user-pages-soft): with none, the
// proxy works at the default size, and the test says so by failing.
func TestGrownSplicePipesAreBounded(t *testing.T) {
	emptySplicePool(t)
	grown, plain := takeSplicePipes(t, maxGrownPipes+4)
	if len(grown) != maxGrownPipes || len(plain) != 4 {
		t.Fatalf("%d pipes grown and %d not, want %d and 4 (kernel refused growing: %v)",
			len(grown), len(plain), maxGrownPipes, splicePipes.refused)
	}
	for _, sp := range append(grown, plain...) {
		got, err := unix.FcntlInt(uintptr(sp.w), unix.F_GETPIPE_SZ, 0)
		if err != nil {
			t.Fatal(err)
		}
		if sp.size != got || sp.grown && got != splicePipeSize {
			t.Fatalf("pipe (grown %v) records %d bytes, the kernel says it holds %d", sp.grown, sp.size, got)
		}
	}
	for _, sp := range append(grown, plain...) {
		discardSplicePipe(sp)
	}
	if splicePipes.grown != 0 {
		t.Fatalf("%d pipes counted as grown after all were closed", splicePipes.grown)
	}
}

// A pipe that could not grow when made grows when it is reused and a grown pipe has closed
// meanwhile, so the pool does not fill up with small pipes for good.
func TestSplicePipeGrowsWhenReused(t *testing.T) {
	emptySplicePool(t)
	grown, plain := takeSplicePipes(t, maxGrownPipes+4)
	if len(plain) != 4 {
		t.Fatalf("%d pipes not grown, want 4", len(plain))
	}
	for _, sp := range grown[:4] {
		discardSplicePipe(sp)
	}
	for _, sp := range append(grown[4:], plain...) {
		putSplicePipe(sp)
	}
	again, small := takeSplicePipes(t, maxGrownPipes)
	if len(small) != 0 {
		t.Fatalf("%d reused pipes not grown with room for them", len(small))
	}
	for _, sp := range again {
		putSplicePipe(sp)
	}
}
