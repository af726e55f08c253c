package frame

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// Frame is one frame read from the wire. Command and Payload alias the
// Reader's buffer and are valid until the next call to ReadFrame.
type Frame struct {
	// Command is the serialized BaseCommand.
	Command []byte
	// Payload is everything after the command (the payload section of a
	// SEND or MESSAGE frame), nil when there is nothing after the command.
	Payload []byte
}

const (
	// initialBufSize is the buffer a Reader starts with; it also bounds how
	// much the Reader asks the underlying reader for at a time early on. Every
	// client connection has a Reader until it forwards, so it is small.
	initialBufSize = 512
	// burstBufSize is the buffer of a Reader that reads in bursts (ReadBursts) while the
	// stream keeps its reads full.
	burstBufSize = 64 << 10
	// maxEmptyReads is how many (0, nil) reads in a row count as no progress.
	maxEmptyReads = 100
)

// Reader reads whole frames from a stream. It reads ahead (several small
// frames may arrive in one underlying Read), validates each header before
// making room for the frame, and grows its buffer only as the frame's bytes
// actually arrive, so a header that announces a large frame costs no memory
// until the data is sent. A read never takes more than HeaderSize+maxFrameSize; a
// buffer grown for a large frame is pooled (its memory at most a quarter above that).
//
// Because it reads ahead, the Reader may hold bytes of frames not yet
// returned; code that stops using the Reader and goes on with the raw
// stream (e.g. to splice bytes after a handshake) must take Buffered first.
//
// A Reader is not safe for concurrent use. Errors are sticky: once
// ReadFrame has failed, the stream is out of step and every later call
// returns the same error. A time-out of the underlying reader (a deadline a
// keep-alive sets) is not: what was read stays buffered and the next call
// goes on where the last one stopped.
type Reader struct {
	rd       io.Reader
	limits   Limits
	limit    int    // largest acceptable totalSize
	buf      []byte // unread data is buf[r:w]
	r, w     int
	skipping int // bytes of a payload still to read past
	err      error
	bursts   bool    // see ReadBursts
	full     bool    // the last read filled the room it was given: the stream has more
	large    *Buffer // buf's pooled buffer, when it grew beyond burstBufSize
	last     int     // the size of the frame ReadFrame returned last
}

// largeBuffers holds Readers' buffers grown for frames larger than burstBufSize.
var largeBuffers Buffers

// NewReader returns a Reader of frames from r whose totalSize is at most
// maxFrameSize (<= 0 means DefaultMaxFrameSize), commands not capped below it.
func NewReader(r io.Reader, maxFrameSize int) *Reader {
	return Limits{MaxFrame: maxFrameSize}.Reader(r)
}

// Reader returns a Reader of frames from r within l.
func (l Limits) Reader(r io.Reader) *Reader {
	return &Reader{rd: r, limits: l, limit: int(effectiveMax(l.MaxFrame))}
}

// Buffered returns the bytes the Reader has read from the stream but not yet
// returned in a frame. The slice aliases the buffer and is valid until the
// next ReadFrame.
func (r *Reader) Buffered() []byte {
	return r.buf[r.r:r.w]
}

// FrameBuffered reports whether the next frame is buffered whole, so that ReadFrame returns
// it without reading the stream (and without waiting for it).
func (r *Reader) FrameBuffered() bool {
	b := r.buf[r.r:r.w]
	return len(b) >= HeaderSize && uint64(len(b)-4) >= uint64(binary.BigEndian.Uint32(b))
}

// Drained reports whether everything read has been returned and the last read did not fill
// the room it was given: the stream had nothing more then.
func (r *Reader) Drained() bool { return r.r == r.w && !r.full }

// ReadFrame reads the next frame. It returns io.EOF only when the stream
// ends on a frame boundary and io.ErrUnexpectedEOF when it ends inside a
// frame; header problems are reported with ErrFrameTooLarge,
// ErrFrameTooSmall or ErrBadCommandSize; errors of the underlying reader
// are returned as they are.
func (r *Reader) ReadFrame() (Frame, error) {
	if r.err != nil {
		return Frame{}, r.err
	}
	f, err := r.readFrame()
	r.fail(err)
	return f, err
}

// fail makes err sticky, unless it is nil or a time-out.
func (r *Reader) fail(err error) {
	if err == nil || isTimeout(err) {
		return
	}
	r.err = err
	r.r, r.w, r.skipping = 0, 0, 0
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

func (r *Reader) readFrame() (Frame, error) {
	span, err := r.header()
	if err != nil {
		return Frame{}, err
	}
	n := span.Size
	if err := r.fill(n); err != nil {
		return Frame{}, err
	}
	f := r.buf[r.r : r.r+n : r.r+n]
	r.r += n
	r.last = n
	fr := Frame{Command: span.Command(f)}
	if span.CommandEnd() < n {
		fr.Payload = f[span.CommandEnd():]
	}
	return fr, nil
}

// header reads and checks the next frame's header, leaving it unread.
func (r *Reader) header() (Span, error) {
	if r.r == r.w {
		// Nothing buffered: start at the front so reads get the whole buffer.
		r.r, r.w = 0, 0
	}
	if err := r.fill(HeaderSize); err != nil {
		if err == io.ErrUnexpectedEOF && r.r == r.w {
			err = io.EOF // clean end between frames
		}
		return Span{}, err
	}
	span, _, err := r.limits.Scan(r.buf[r.r:r.w])
	return span, err
}

// ReadCommand reads the next frame and decodes its command; a payload section is read past
// without being buffered, so a Reader of commands never holds more than its largest
// command. Errors as ReadFrame's, and Decode's.
func (r *Reader) ReadCommand() (*pb.BaseCommand, error) {
	if r.err != nil {
		return nil, r.err
	}
	cmd, err := r.readCommand()
	r.fail(err)
	return cmd, err
}

// readCommand decodes the next command. A time-out while it reads past the payload does not
// hold the command back: the rest is skipped on the next call.
func (r *Reader) readCommand() (*pb.BaseCommand, error) {
	if r.skipping > 0 {
		if err := r.skip(r.skipping); err != nil {
			return nil, err
		}
	}
	span, err := r.header()
	if err != nil {
		return nil, err
	}
	if err := r.fill(span.CommandEnd()); err != nil {
		return nil, err
	}
	cmd, err := Decode(span.Command(r.buf[r.r:]))
	if err != nil {
		return nil, err
	}
	if err := r.skip(span.Size); err != nil && !isTimeout(err) {
		return nil, err
	}
	return cmd, nil
}

// skip consumes n bytes: what is buffered, then the rest read through the buffer. What is
// left to skip is kept in skipping until it is done.
func (r *Reader) skip(n int) error {
	k := min(n, r.w-r.r)
	r.r += k
	n -= k
	r.skipping = n
	for empty := 0; n > 0; {
		r.r, r.w = 0, 0
		if len(r.buf) == 0 {
			r.grow(1)
		}
		m, err := r.rd.Read(r.buf[:min(n, len(r.buf))])
		n -= m
		r.skipping = n
		if n == 0 {
			break // done: a pending error resurfaces on the next read
		}
		if err := readProgress(m, err, &empty); err != nil {
			return err
		}
	}
	return nil
}

// fill makes sure that at least n bytes are buffered at buf[r:]. It returns
// io.ErrUnexpectedEOF if the stream ends first. n is at most 4+limit.
func (r *Reader) fill(n int) error {
	empty := 0
	for r.w-r.r < n {
		if len(r.buf)-r.r < n && r.r > 0 {
			// Not enough room after the unread data: move it to the front.
			r.w = copy(r.buf, r.buf[r.r:r.w])
			r.r = 0
		}
		if r.bursts {
			r.fitBurst()
		}
		if r.w == len(r.buf) {
			r.grow(n)
		}
		m, err := r.rd.Read(r.buf[r.w:])
		if m < 0 || m > len(r.buf)-r.w {
			return fmt.Errorf("frame: reader returned invalid count %d", m)
		}
		r.full = m == len(r.buf)-r.w
		r.w += m
		if r.w-r.r >= n {
			return nil // enough data; a pending error resurfaces on the next read
		}
		if err := readProgress(m, err, &empty); err != nil {
			return err
		}
	}
	return nil
}

// readProgress is what a read of m bytes that returned err means to a loop that needs more
// bytes: the stream ended early, it failed, or it has made no progress too many reads in a
// row (empty counts them).
func readProgress(m int, err error, empty *int) error {
	switch {
	case err == io.EOF:
		return io.ErrUnexpectedEOF
	case err != nil:
		return err
	case m == 0:
		if *empty++; *empty >= maxEmptyReads {
			return io.ErrNoProgress
		}
	default:
		*empty = 0
	}
	return nil
}

// smallBuffers holds initial-size buffers given back by idle Readers (Release). Arrays, not
// slices, so that putting one back allocates nothing.
var smallBuffers = sync.Pool{New: func() any { return new([initialBufSize]byte) }}

// burstBuffers holds the buffers of Readers between bursts (ReadBursts).
var burstBuffers = sync.Pool{New: func() any { return new([burstBufSize]byte) }}

// ReadBursts makes the Reader read up to burstBufSize bytes at a time while the stream keeps
// its reads full, and go back to its small buffer when a read that did not fill the buffer
// has been consumed: a client that streams small frames costs a read per burst rather than
// one per few frames, and one that waits for its next frame holds the small buffer.
// A Reader whose frames are smaller than a burst buffer keeps to its own buffers.
func (r *Reader) ReadBursts() { r.bursts = HeaderSize+r.limit >= burstBufSize }

// fitBurst, before a read, takes a burst buffer when the last read was full, and gives it
// back once what a short read brought is consumed. Buffers grown for large frames stay.
func (r *Reader) fitBurst() {
	switch {
	case r.full && len(r.buf) < burstBufSize:
		r.moveTo(burstBuffers.Get().(*[burstBufSize]byte)[:], nil)
	case !r.full && r.r == r.w && (cap(r.buf) == burstBufSize || r.large != nil):
		r.putBuf()
		r.buf, r.r, r.w = nil, 0, 0
	}
}

// Shrink gives back a burst buffer, or a pooled one more than twice what it holds, keeping
// what is unread in a buffer that holds it: a reader that waits in the middle of a frame
// then holds what arrived, not the room of a burst.
func (r *Reader) Shrink() {
	n := r.w - r.r
	if cap(r.buf) != burstBufSize && (r.large == nil || 2*n >= len(r.buf)) {
		return
	}
	r.moveTo(bufFor(n))
	r.full = false
}

// putBuf gives a pooled buffer back to its pool (the Reader stops using it).
func (r *Reader) putBuf() {
	if r.large != nil {
		r.large.Put()
		r.large = nil
		return
	}
	switch cap(r.buf) {
	case initialBufSize:
		smallBuffers.Put((*[initialBufSize]byte)(r.buf[:initialBufSize]))
	case burstBufSize:
		burstBuffers.Put((*[burstBufSize]byte)(r.buf[:burstBufSize]))
	}
}

// Release gives the buffer back when it holds nothing unread, so that a Reader waiting for
// its next frame (an idle connection) holds no memory; the next read takes one again.
func (r *Reader) Release() {
	if r.r != r.w || r.buf == nil {
		return
	}
	r.putBuf()
	r.buf, r.r, r.w = nil, 0, 0
}

// grow enlarges the buffer (which is full and has its unread data at the
// front, or is empty) so that more of the n bytes being waited for fit. It
// at most doubles the buffer, so memory follows the data that has arrived,
// and never goes beyond what the frame needs or HeaderSize+limit.
func (r *Reader) grow(n int) {
	size := max(2*len(r.buf), initialBufSize)
	size = min(size, max(n, initialBufSize), HeaderSize+r.limit)
	if size <= len(r.buf) {
		// Cannot happen: n > w-r, and r == 0 whenever the buffer is full
		// and still short of n.
		panic(errors.New("frame: internal error: reader buffer cannot grow"))
	}
	r.moveTo(bufFor(size))
}

// bufFor is a buffer of at least n bytes: the small one, a pooled one beyond a burst's size,
// a new one between (large: the pooled Buffer, if it is one).
func bufFor(n int) (b []byte, large *Buffer) {
	switch {
	case n <= initialBufSize:
		return smallBuffers.Get().(*[initialBufSize]byte)[:], nil
	case n > burstBufSize:
		large = largeBuffers.Get(n)
		return large.B, large
	}
	return make([]byte, n), nil
}

// moveTo makes nb the buffer (large: its pooled Buffer, if it is one), the unread bytes moved
// to its front and the old buffer given back.
func (r *Reader) moveTo(nb []byte, large *Buffer) {
	r.w = copy(nb, r.buf[r.r:r.w])
	r.r = 0
	r.putBuf()
	r.buf, r.large = nb, large
}

// Reserve makes the buffer at least n bytes (at most what one frame may take), so that one
// read takes in many frames: for a connection that carries many streams' frames, where the
// buffer is worth keeping. What is buffered stays.
func (r *Reader) Reserve(n int) {
	n = min(n, HeaderSize+r.limit)
	if len(r.buf) >= n {
		return
	}
	r.moveTo(bufFor(n))
}

// TakeLarge hands over the pooled buffer of a large frame: when the frame ReadFrame just
// returned fills more than three quarters of a buffer grown beyond a burst's size (the
// taker's memory is then about what a copy would take), that buffer (and
// with it the frame's bytes) becomes the caller's, to put back once done with the frame.
// The Reader goes on in a pooled buffer of the same size, with what it read beyond the
// frame: it holds what it held before, and a stream of large frames is read without growing
// the buffer anew for each. So a large frame is forwarded from the memory it was read into,
// not copied first. nil: the frame stays in the Reader's buffer (valid until the next
// ReadFrame).
func (r *Reader) TakeLarge() *Buffer {
	if r.large == nil || r.err != nil || 4*r.last <= 3*len(r.buf) {
		return nil
	}
	r.last = 0 // taken: a second call has no frame to hand over
	taken, rest := r.large, r.buf[r.r:r.w]
	r.large = largeBuffers.Get(len(taken.B))
	r.buf, r.r = r.large.B, 0
	r.w = copy(r.buf, rest)
	return taken
}

// Peek returns the next n bytes without consuming them, reading until they have arrived (or
// what arrived, with the read's error). Its errors are not sticky: the next read meets the
// stream as Peek left it.
func (r *Reader) Peek(n int) ([]byte, error) {
	if r.err != nil {
		return nil, r.err
	}
	if r.r == r.w {
		r.r, r.w = 0, 0
	}
	if err := r.fill(n); err != nil {
		return r.buf[r.r:r.w], err
	}
	return r.buf[r.r : r.r+n], nil
}
