package forward

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sys/unix"

	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/frames"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/loopback"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/wait"
)

func splicePipesHeld(ps *splicePipes) int {
	ps.Lock()
	defer ps.Unlock()
	return ps.held
}

// runPassthrough is runPipe for an unframed pipe; readAhead plays bytes the handshake read
// past CONNECT.
func runPassthrough(t *testing.T, readAhead []byte) (in, out net.Conn, p *Pipe, done <-chan error) {
	t.Helper()
	in, srcConn := loopback.Pair(t)
	dstConn, out := loopback.Pair(t)
	p = New(Config{Src: srcConn, ReadAhead: readAhead, Dst: NewSink(dstConn, nil), Buffers: NewBuffers(), Unframed: true,
		Frames: prometheus.NewCounter(prometheus.CounterOpts{Name: "f"}), Bytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "b"})})
	errc := make(chan error, 1)
	go func() {
		err := p.Run()
		dstConn.(*net.TCPConn).CloseWrite()
		errc <- err
	}()
	return in, out, p, errc
}

func waitPipesHeld(t *testing.T, ps *splicePipes, what string, want int) {
	t.Helper()
	if !wait.Within(5*time.Second, func() bool { return splicePipesHeld(ps) == want }) {
		t.Fatalf("%s: %d splice pipes held, want %d", what, splicePipesHeld(ps), want)
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
		waitPipesHeld(t, p.pipes, "idle", 0)
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
	in, out, p, done := runPassthrough(t, nil)
	stream := make([]byte, 64<<20)
	rand.Read(stream)
	sent := writeUntilBlocked(t, in, stream)
	if held := splicePipesHeld(p.pipes); held > 1 {
		t.Fatalf("%d pipes held by one stalled direction", held)
	}
	got, err := readWhileWriting(t, in, out, stream[sent:])
	if err != nil || !bytes.Equal(got, stream) {
		t.Fatalf("after the stall: %d bytes of %d, err %v", len(got), len(stream), err)
	}
	if err := <-done; !errors.Is(err, io.EOF) {
		t.Fatalf("pipe ended with %v", err)
	}
	waitPipesHeld(t, p.pipes, "after the end", 0)
}

func takeSplicePipes(t *testing.T, ps *splicePipes, n int) (grown, plain []*splicePipe) {
	t.Helper()
	for range n {
		sp, err := ps.get()
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
	ps := &NewBuffers().pipes
	grown, plain := takeSplicePipes(t, ps, maxGrownPipes+4)
	if len(grown) != maxGrownPipes || len(plain) != 4 {
		t.Fatalf("%d pipes grown and %d not, want %d and 4 (kernel refused growing: %v)",
			len(grown), len(plain), maxGrownPipes, ps.refused)
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
		ps.discard(sp)
	}
	if ps.grown != 0 {
		t.Fatalf("%d pipes counted as grown after all were closed", ps.grown)
	}
}

// A pipe that could not grow when made grows when it is reused and a grown pipe has closed
// meanwhile, so the pool does not fill up with small pipes for good.
func TestSplicePipeGrowsWhenReused(t *testing.T) {
	ps := &NewBuffers().pipes
	grown, plain := takeSplicePipes(t, ps, maxGrownPipes+4)
	if len(plain) != 4 {
		t.Fatalf("%d pipes not grown, want 4", len(plain))
	}
	for _, sp := range grown[:4] {
		ps.discard(sp)
	}
	for _, sp := range append(grown[4:], plain...) {
		ps.put(sp)
	}
	again, small := takeSplicePipes(t, ps, maxGrownPipes)
	if len(small) != 0 {
		t.Fatalf("%d reused pipes not grown with room for them", len(small))
	}
	for _, sp := range append(again, small...) {
		ps.discard(sp)
	}
	for _, sp := range ps.free {
		sp.close()
	}
}

// A frame cut off in its spliced rest: the pipe ends with io.ErrUnexpectedEOF, holds no splice
// pipe, and no pipe kept for reuse holds bytes (they would go ahead of another session's
// frame).
func TestPipeCutFrameLeavesNoBytesInPipes(t *testing.T) {
	in, out, p, done := runPipe(t, NewBuffers(), nil)
	first, cut := frames.Send(t, 1<<20, 1), frames.Send(t, 1<<20, 2)[:100<<10]
	go func() {
		in.Write(first)
		time.Sleep(50 * time.Millisecond) // the second frame's head read on its own, then part of its rest
		in.Write(cut)
		in.(*net.TCPConn).CloseWrite()
	}()
	got, err := io.ReadAll(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("pipe ended with %v, want io.ErrUnexpectedEOF", err)
	}
	if !bytes.Equal(got[:min(len(got), len(first))], first) || len(got) > len(first)+len(cut) {
		t.Fatalf("forwarded %d bytes, want the first frame (%d) and at most what came of the second", len(got), len(first))
	}
	ps := p.pipes
	ps.Lock()
	defer ps.Unlock()
	if ps.held != 0 {
		t.Fatalf("%d splice pipes held after the pipe ended", ps.held)
	}
	for _, sp := range ps.free {
		if k, err := unix.IoctlGetInt(sp.r, unix.TIOCINQ); err != nil || k != 0 {
			t.Fatalf("a pipe kept for reuse holds %d bytes (%v)", k, err)
		}
	}
}

// smallPipe is a pipe of about size bytes (the kernel rounds to pages), as a kernel gives a
// user over pipe-user-pages-soft.
func smallPipe(t *testing.T, size int) *splicePipe {
	t.Helper()
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		t.Fatal(err)
	}
	n, err := unix.FcntlInt(uintptr(fds[1]), unix.F_SETPIPE_SZ, size)
	if err != nil {
		t.Fatal(err)
	}
	return &splicePipe{r: fds[0], w: fds[1], size: n}
}

// Pipes of a page or two (not grown, as a kernel gives a user over pipe-user-pages-soft)
// still carry big frames whole.
func TestPipeSmallSplicePipesCarryBigFrames(t *testing.T) {
	for _, size := range []int{4096, 8192} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			b := NewBuffers()
			b.pipes.refused = true // pipes stay at the size they have
			b.pipes.free = append(b.pipes.free, smallPipe(t, size))
			in, out, _, done := runPipe(t, b, nil)
			var stream []byte
			for i := range 3 {
				stream = append(stream, frames.Send(t, 1<<20, uint64(i))...)
			}
			go func() {
				in.Write(stream)
				in.(*net.TCPConn).CloseWrite()
			}()
			out.SetReadDeadline(time.Now().Add(20 * time.Second))
			got, err := io.ReadAll(out)
			if err != nil || !bytes.Equal(got, stream) {
				t.Fatalf("forwarded %d of %d bytes (%v)", len(got), len(stream), err)
			}
			<-done
		})
	}
}

// A big frame's head that cannot be written (the far side reset) ends the pipe holding no
// splice pipe.
func TestPipeFailedHeadWriteHoldsNoPipe(t *testing.T) {
	b := NewBuffers()
	b.pipes.refused = true
	b.pipes.free = append(b.pipes.free, smallPipe(t, 4096))
	in, out, _, done := runPipe(t, b, nil)
	out.(*net.TCPConn).SetLinger(0)
	out.Close() // a reset for the pipe's first write
	go in.Write(frames.Send(t, 1<<20, 1))
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the pipe ended without an error after the far side reset")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the pipe did not end after the far side reset")
	}
	if held := splicePipesHeld(&b.pipes); held != 0 {
		t.Fatalf("%d splice pipes held after the pipe ended", held)
	}
	in.Close()
}
