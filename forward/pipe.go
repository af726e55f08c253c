package forward

import (
	"errors"
	"io"
	"net"
	"sync/atomic"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// Verdict is a filter's decision on one frame.
type Verdict uint8

const (
	Pass Verdict = iota // the frame goes on as it came
	Drop                // the frame is dropped (the filter may have injected something in its place)
	End                 // the frame is refused and the session ends (the filter has told the peer why)
)

// ErrRefused ends a pipe whose filter refused a frame with End.
var ErrRefused = errors.New("command refused")

// Filter sees the command of every watched frame (not its payload) and decides its fate. It
// may inject frames into either sink; the frames before this one have been written by then.
// It runs on the pipe's goroutine, so it must not block for long.
type Filter func(t pb.BaseCommand_Type, command []byte) Verdict

// defaultSpliceAbove: a frame whose not-yet-read remainder is longer than this goes socket to
// socket (splice(2)) instead of through the read buffer. Measured with
// BenchmarkForwardSpliceThreshold (numbers in bench/results/forward.md): for every frame that
// fits the large buffer (4 to 60 KiB), copying through it cost 10-25% less CPU per frame
// than splicing the remainder, so only frames larger than the buffer are spliced.
const defaultSpliceAbove = largeBufferSize

// While big frames come (headReads), a read at a frame boundary takes only the frame's head
// (headReadSize: its header, command and the start of its payload), so the rest of a frame
// longer than headSpliceAbove goes socket to socket without entering user space. A frame of
// bigFrameSize or more that had to be streamed turns this on; a frame that fits a read turns
// it off.
const (
	headReadSize    = 1 << 10
	headSpliceAbove = 16 << 10
	bigFrameSize    = 32 << 10
)

// Config is one direction of a forwarding session.
type Config struct {
	Src net.Conn // what is read
	// ReadAhead are bytes a handshake read from Src past its last command: the first to go.
	ReadAhead []byte
	Dst       *Sink
	Limits    frame.Limits                   // of Src's frames
	Filter    Filter                         // nil: forward everything without looking
	Watch     func(pb.BaseCommand_Type) bool // the types Filter acts on; nil: all
	Pace      func(n int)                    // called after n bytes went out; may wait (a publish rate)
	Partial   *Mark                          // while a frame from Src is incomplete; nil: not watched
	Frames    prometheus.Counter
	Bytes     prometheus.Counter
	Buffers   *Buffers
	// SpliceAbove: a frame whose unread rest is longer goes socket to socket; 0: the default.
	SpliceAbove int
	// Unframed: nothing needs this direction's frames (no filter, nothing injected into Dst),
	// so between two TCP sockets it is forwarded as a byte stream (passthrough).
	Unframed bool
	// Idle parks Src while it is quiet, so that the pipe holds no goroutine; nil: it waits on
	// its goroutine.
	Idle *Idle
}

// Pipe forwards whole frames from src to dst until src ends. Run returns io.EOF when src
// ended cleanly on a frame boundary. Frames are checked (header and size limits, by
// frame.Limits.Scan) before a byte of them is written, never decoded: the header gives the
// length, and only a filter looks at the command. Every complete frame a read brought in goes
// out in one write, straight from the read buffer (frames in the buffer are contiguous, so
// one write is the batch and no byte is copied). A frame too big for the buffer, or with a
// long remainder, has its buffered head written and its rest copied socket to socket.
//
// Memory is one pooled read buffer at most, none while src is idle (see readRaw). A slow dst
// blocks this loop, which stops reading src, so backpressure reaches the sender.
type Pipe struct {
	src         net.Conn
	readAhead   []byte
	dst         *Sink
	limits      frame.Limits
	filter      Filter
	watch       func(pb.BaseCommand_Type) bool
	pace        func(n int)
	partial     *Mark
	frames      prometheus.Counter
	bytes       prometheus.Counter
	buffers     *bufferPools
	pipes       *splicePipes
	spliceAbove int
	unframed    bool

	// totals for the session summary; totalBytes is also read while the pipe runs (a
	// draining session watches it settle)
	totalFrames uint64
	totalBytes  atomic.Uint64
	readBytes   uint64 // bytes read into user space (what else was forwarded was spliced)

	// The buffer: buf[start:scan] are complete frames cleared for the next write (batch of
	// them), buf[scan:end] is what is still to be looked at.
	buf              buffer
	start, scan, end int
	batch            uint64
	approved         bool            // the frame at scan already passed the filter
	wantLarge        bool            // reads fill the small buffer: take a large one next
	shortReads       int             // consecutive reads much shorter than a small buffer
	raw              syscall.RawConn // src's, for reads that hold no buffer while waiting
	readFn           func(fd uintptr) bool
	readN            int
	readErr          error
	readLimit        int      // the most the next read takes; 0: all the buffer holds
	headReads        bool     // big frames come: reads at a frame boundary take only a head
	rest             *splicer // moves the unbuffered rest of a streamed frame
	srcTCP, dstTCP   *net.TCPConn

	// Parking while src is idle (see idle.go); idle nil: the pipe waits on its goroutine.
	idle      *Idle
	idleUntil int64    // unix nanoseconds of the idle read deadline armed on src; 0: none
	refused   bool     // the poller refused src: the pipe waits on its goroutine
	splice    *splicer // passthrough's state between parks
}

// New makes the pipe of one direction; nothing is read until Run.
func New(c Config) *Pipe {
	p := &Pipe{src: c.Src, readAhead: c.ReadAhead, dst: c.Dst, limits: c.Limits, filter: c.Filter, watch: c.Watch,
		pace: c.Pace, partial: c.Partial, frames: c.Frames, bytes: c.Bytes, buffers: &c.Buffers.reads, pipes: &c.Buffers.pipes,
		spliceAbove: c.SpliceAbove, unframed: c.Unframed, idle: c.Idle}
	if p.spliceAbove <= 0 {
		p.spliceAbove = defaultSpliceAbove
	}
	return p
}

// Frames is how many frames went out (once the pipe has ended).
func (p *Pipe) Frames() uint64 { return p.totalFrames }

// Bytes is how many bytes went out so far; it may be read while the pipe runs.
func (p *Pipe) Bytes() uint64 { return p.totalBytes.Load() }

// ReadBytes is how many bytes went through user space (the rest was spliced), once the pipe
// has ended.
func (p *Pipe) ReadBytes() uint64 { return p.readBytes }

func (p *Pipe) init() {
	p.srcTCP, _ = p.src.(*net.TCPConn)
	p.dstTCP, _ = p.dst.conn.(*net.TCPConn)
	p.useRawReads()
	// Bytes the handshake read ahead are the first bytes to forward.
	if head := p.takeReadAhead(); len(head) > 0 {
		p.wantLarge = len(head) > smallBufferSize
		p.buffers.get(&p.buf, p.wantLarge)
		// The handshake's reader never holds more than its largest command, which fits.
		p.end = copy(p.buf.bytes(), head)
	}
}

// takeReadAhead hands over the bytes read ahead, once.
func (p *Pipe) takeReadAhead() []byte {
	head := p.readAhead
	p.readAhead = nil
	return head
}

// Run forwards until src ends (io.EOF at a frame boundary) or fails, or until the pipe parks
// while src is idle (ErrParked): the Idle's waiter then has Resume called on a fresh goroutine.
func (p *Pipe) Run() error {
	if p.unframed && canPassthrough {
		src, srcOK := p.src.(*net.TCPConn)
		dst, dstOK := p.dst.conn.(*net.TCPConn)
		if srcOK && dstOK {
			return p.passthrough(src, dst)
		}
	}
	p.init()
	return p.Resume()
}

// Resume runs the pipe, after Run or a park, until src ends, or until it parks again
// (ErrParked).
func (p *Pipe) Resume() error {
	if p.splice != nil {
		return p.splicing()
	}
	err := p.forwardFrames()
	if err != ErrParked {
		p.buffers.put(&p.buf)
	}
	return err
}

func (p *Pipe) forwardFrames() error {
	for {
		next, err := p.walk()
		if werr := p.writeOut(); werr != nil {
			return werr
		}
		if err != nil {
			return err
		}
		if next.passed {
			if have := p.end - p.start; next.size > largeBufferSize || next.size-have > p.restSpliceAbove() {
				if err := p.stream(next.size); err != nil {
					return err
				}
				continue
			}
		}
		if err := p.makeRoom(next.need); err != nil {
			return err
		}
		p.markPartial()
		p.readLimit = 0
		if p.headReads && p.start == p.end {
			p.readLimit = headReadSize
		}
		if err := p.read(true); err != nil {
			if errors.Is(err, io.EOF) && p.start != p.end {
				return io.ErrUnexpectedEOF
			}
			return err
		}
	}
}

// next is what the frame at scan needs before the pipe can go on: its header (size 0), its
// command (for the filter), or all of it.
type next struct {
	size int // the whole frame, once its header is read
	need int // the bytes of it the buffer must hold
	// passed: the filter has passed the frame's command (or there is none), so its bytes may
	// go out before the frame is whole (stream). Until then only the buffer may hold them.
	passed bool
}

// walk moves scan over the frames in the buffer: each complete frame joins the batch, after
// the filter (if any) has seen its command. It stops at the first frame the buffer does not
// hold as far as needed, and says what that frame needs.
func (p *Pipe) walk() (next, error) {
	for {
		b := p.buf.bytes()[p.scan:p.end]
		span, ok, err := p.limits.Scan(b)
		if err != nil {
			return next{}, err
		}
		if !ok {
			return next{need: frame.HeaderSize}, nil
		}
		if p.filter != nil && !p.approved {
			if span.CommandEnd() > largeBufferSize {
				if err := p.filterOutsideBuffer(span); err != nil {
					return next{}, err
				}
				continue
			}
			if len(b) < span.CommandEnd() {
				return next{size: span.Size, need: span.CommandEnd()}, nil
			}
			passed, err := p.check(span, b)
			if err != nil || !passed {
				if err != nil {
					return next{}, err
				}
				continue
			}
		}
		if len(b) < span.Size {
			p.approved = p.filter != nil
			return next{size: span.Size, need: span.Size, passed: true}, nil
		}
		p.scan += span.Size
		p.batch++
		p.approved = false
		p.headReads = false
	}
}

// check runs the filter on the frame at scan, whose command is buffered. It reports whether
// the frame goes on; a dropped frame is consumed (from the socket too, where its rest is
// still unread).
func (p *Pipe) check(span frame.Span, b []byte) (bool, error) {
	cmd := span.Command(b)
	t, err := frame.PeekType(cmd)
	if err != nil {
		return false, err
	}
	// A command the filter does not act on stays in the batch. For the others, the frames
	// before go first, so whatever the filter injects follows them.
	if p.watch != nil && !p.watch(t) {
		return true, nil
	}
	if err := p.writeOut(); err != nil {
		return false, err
	}
	switch p.filter(t, cmd) {
	case End:
		return false, ErrRefused
	case Drop:
		return false, p.drop(span.Size)
	}
	return true, nil
}

// drop consumes the frame at scan, which the filter refused.
func (p *Pipe) drop(size int) error {
	if p.end-p.scan >= size {
		p.scan += size
		p.start = p.scan
		return nil
	}
	return p.discard(size - (p.end - p.scan))
}

// filterOutsideBuffer handles a frame whose command does not fit a read buffer (a broker's
// topic list of a large namespace): it is read whole into memory of its own (within the
// frame limit), filtered, and written or dropped.
func (p *Pipe) filterOutsideBuffer(span frame.Span) error {
	if err := p.writeOut(); err != nil {
		return err
	}
	p.disarmIdle()
	whole := make([]byte, span.Size)
	k := copy(whole, p.buf.bytes()[p.scan:p.end])
	p.reset()
	if _, err := io.ReadFull(p.src, whole[k:]); err != nil {
		return eofIsUnexpected(err)
	}
	p.readBytes += uint64(len(whole) - k)
	cmd := span.Command(whole)
	t, err := frame.PeekType(cmd)
	if err != nil {
		return err
	}
	if p.watch == nil || p.watch(t) {
		switch p.filter(t, cmd) {
		case End:
			return ErrRefused
		case Drop:
			return nil
		}
	}
	if err := p.dst.Write(whole); err != nil {
		return err
	}
	p.count(1, len(whole))
	return nil
}

// markPartial tells the stall watchdog whether the pipe waits for the rest of a frame (and
// since when bytes last came), or for a new one.
func (p *Pipe) markPartial() {
	switch {
	case p.partial == nil:
	case p.start != p.end:
		p.partial.Progress()
	default:
		p.partial.End()
	}
}

// reset empties the buffer.
func (p *Pipe) reset() {
	p.start, p.scan, p.end = 0, 0, 0
	p.approved = false
}

// writeOut writes the batch, the complete frames buf[start:scan], in one write and counts
// them.
func (p *Pipe) writeOut() error {
	if p.scan == p.start {
		return nil
	}
	out := p.buf.bytes()[p.start:p.scan]
	err := p.dst.Write(out)
	p.start = p.scan
	if err != nil {
		return err
	}
	p.count(p.batch, len(out))
	p.batch = 0
	return nil
}

// count adds forwarded frames to the metrics: once per write, not per frame, and as
// integers, which a Prometheus counter adds with one atomic instruction. Then it paces the
// pipe where a rate applies: while it waits, nothing is read from src.
func (p *Pipe) count(frames uint64, bytes int) {
	p.frames.Add(float64(frames))
	p.bytes.Add(float64(bytes))
	p.totalFrames += frames
	p.totalBytes.Add(uint64(bytes))
	if p.pace != nil {
		p.pace(bytes)
	}
}

// makeRoom arranges for need bytes of the frame at start to fit in the buffer after a read:
// an empty buffer starts over (in the large class if reads have been filling it), a
// partial frame moves to the front, a frame bigger than a small buffer moves to a large one.
func (p *Pipe) makeRoom(need int) error {
	b := p.buf.bytes()
	defer func() { p.scan = p.start }() // the batch was written: nothing lies before scan
	if p.start == p.end {
		p.start, p.end = 0, 0
		if p.wantLarge && p.buf.large == nil && b != nil {
			p.buffers.put(&p.buf)
			p.buffers.get(&p.buf, true)
		}
		return nil
	}
	if need <= len(b)-p.start && p.end < len(b) {
		return nil
	}
	if need > len(b) {
		if need > largeBufferSize {
			return frame.ErrCommandTooLarge // bigger needs are streamed or read aside
		}
		var bigger buffer
		p.buffers.get(&bigger, true)
		p.end = copy(bigger.bytes(), b[p.start:p.end])
		p.start = 0
		p.buffers.put(&p.buf)
		p.buf = bigger
		p.wantLarge = true
		return nil
	}
	p.end = copy(b, b[p.start:p.end])
	p.start = 0
	return nil
}

// read reads what src has into the free end of the buffer, taking a buffer if it holds none.
// Where mayPark, a src idle for long parks the pipe (ErrParked).
func (p *Pipe) read(mayPark bool) error {
	if p.raw != nil {
		for {
			err := p.raw.Read(p.readFn)
			if err == nil {
				break
			}
			if err = p.waitIdle(err, mayPark); err != nil {
				return err
			}
		}
		if p.readErr != nil {
			return p.readErr
		}
	} else {
		if p.buf.bytes() == nil {
			p.buffers.get(&p.buf, p.wantLarge)
		}
		into := p.buf.bytes()[p.end:]
		if p.readLimit > 0 && len(into) > p.readLimit {
			into = into[:p.readLimit]
		}
		n, err := p.src.Read(into)
		p.readN = n
		if n == 0 && err != nil {
			return err
		}
	}
	p.end += p.readN
	p.readBytes += uint64(p.readN)
	// The class follows the traffic: a read that fills the buffer asks for a large one; only
	// a long run of short reads goes back to small ones.
	switch {
	case p.end == len(p.buf.bytes()):
		p.wantLarge, p.shortReads = true, 0
	case p.readN < smallBufferSize/2:
		if p.shortReads++; p.shortReads >= 64 {
			p.wantLarge = false
		}
	default:
		p.shortReads = 0
	}
	return nil
}

// stream forwards a frame of n bytes whose head is buffered: the head, then the rest
// straight from socket to socket, holding the sink so nothing is injected mid-frame.
// Between two TCP sockets the kernel moves a rest longer than restSpliceAbove (splice); a
// shorter one and any rest on other connections (TLS) go through the read buffer, a chunk at
// a time. The head leaves on its own: written into the splice pipe ahead of the rest, or
// with MSG_MORE to leave with it, it cost twice the CPU per GB at 64 KiB (the proxy-bound
// benchmark, Linux 6.18: the splice out of the pipe took ten times as long).
func (p *Pipe) stream(n int) error {
	head := p.buf.bytes()[p.start:p.end]
	rest := int64(n - len(head))
	p.dst.mu.Lock()
	defer p.dst.mu.Unlock()
	if err := p.dst.writeLocked(head); err != nil {
		return err
	}
	p.reset()
	p.disarmIdle()
	p.restDue(true)
	defer p.restDue(false)
	tcp := canPassthrough && p.srcTCP != nil && p.dstTCP != nil
	spliced := tcp && rest > int64(p.restSpliceAbove())
	p.headReads = tcp && n >= bigFrameSize
	if spliced {
		if err := p.spliceRest(rest); err != nil {
			return err
		}
	} else if err := p.copyThroughBuffer(rest); err != nil {
		return err
	}
	p.count(1, n)
	return nil
}

// restDue starts (true) or stops the stall watchdog's clock on the rest of a frame from src.
// It runs only while the pipe waits for src, not while it writes to dst: a dst that stops
// reading then shows as such (dst's own mark), not as src stalling.
func (p *Pipe) restDue(due bool) {
	switch {
	case p.partial == nil:
	case due:
		p.partial.Progress()
	default:
		p.partial.End()
	}
}

// restSpliceAbove is the length above which the unread rest of a frame is spliced.
func (p *Pipe) restSpliceAbove() int {
	if p.headReads {
		return min(p.spliceAbove, headSpliceAbove)
	}
	return p.spliceAbove
}

func (p *Pipe) copyThroughBuffer(rest int64) error {
	if p.buf.bytes() == nil {
		p.buffers.get(&p.buf, true)
	}
	b := p.buf.bytes()
	for rest > 0 {
		k, err := p.src.Read(b[:min(int64(len(b)), rest)])
		p.readBytes += uint64(k)
		if k > 0 {
			p.restDue(false)
			if werr := p.dst.writeLocked(b[:k]); werr != nil {
				return werr
			}
			p.restDue(true)
			rest -= int64(k)
		}
		if err != nil && rest > 0 {
			return eofIsUnexpected(err)
		}
	}
	return nil
}

// discard drops the unread rest of a frame the filter refused.
func (p *Pipe) discard(rest int) error {
	p.reset()
	p.readLimit = 0
	for rest > 0 {
		if err := p.read(false); err != nil {
			return eofIsUnexpected(err)
		}
		k := min(rest, p.end)
		rest -= k
		p.start, p.scan = k, k
		if p.start == p.end {
			p.reset()
		}
	}
	return nil
}

// eofIsUnexpected turns an EOF in the middle of a frame into io.ErrUnexpectedEOF.
func eofIsUnexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
