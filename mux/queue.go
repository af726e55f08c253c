package mux

import (
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"time"
	"unsafe"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// Frame is one frame on its way out: the header and the (re-encoded) command, then the
// payload section exactly as it came. Written together in one vectored write.
type Frame struct {
	Head    []byte
	Payload []byte
	buf     *frame.Buffer       // where the frame's bytes are, given back once it was written; nil: not pooled
	pay     *frame.Buffer       // where the payload is, when it was handed over in the buffer it was read into
	chunk   *chunk              // where the frame is, when it was built in its client's chunk (buf is nil)
	typ     pb.BaseCommand_Type // the command's type where it was read already; 0: not known
	// unused room of a chunk of its client's, let go before it was filled, that the frame
	// counts as held (it is given back no sooner than the frame is written)
	extra int32
}

// Type is the frame's command type (read from its bytes unless the frame was made knowing it).
func (f Frame) Type() (pb.BaseCommand_Type, error) {
	if f.typ != 0 {
		return f.typ, nil
	}
	return frame.PeekType(f.Command())
}

// Release gives the frame's buffers back to their pools: the frame was written, or is
// dropped. Nothing may use it afterwards.
func (f Frame) Release() {
	f.buf.Put()
	f.pay.Put()
	f.chunk.release()
}

// Size is the frame's length on the wire.
func (f Frame) Size() int { return len(f.Head) + len(f.Payload) }

// held is the memory a queued frame keeps: its buffer's whole capacity (a pooled buffer is
// of its size class: a 27-byte SEND_RECEIPT's takes 128 bytes, a 1 MiB message's 1.25 MiB),
// or its bytes in a chunk and the room of a chunk it is charged with (extra), and
// frameOverhead. The queues' bounds count this, not the frame's size on the wire: a
// client's queue of small frames counted by their size held eight times its bound.
func (f Frame) held() int {
	n := f.Size()
	if f.buf != nil {
		n = cap(f.buf.B)
		if f.pay != nil {
			n += cap(f.pay.B)
		}
	}
	return n + int(f.extra) + frameOverhead
}

// frameOverhead is what a queued frame holds besides its bytes: its Frame in the queue's
// slice (twice, as the slice grows by doubling) and its frame.Buffer, or its chunk's (a
// chunk may hold a single frame).
const frameOverhead = int(2*unsafe.Sizeof(Frame{}) + unsafe.Sizeof(frame.Buffer{}) + unsafe.Sizeof(chunk{}))

// Encode frames cmd with a payload section of payload (nil for a simple command); the
// totalSize in the header counts the payload, which is not copied.
func Encode(cmd *pb.BaseCommand, payload []byte) (Frame, error) {
	head, err := frame.AppendCommand(nil, cmd)
	if err != nil {
		return Frame{}, err
	}
	total := uint64(len(head)-4) + uint64(len(payload))
	if total > 1<<32-1 {
		return Frame{}, frame.ErrFrameTooLarge
	}
	binary.BigEndian.PutUint32(head, uint32(total))
	return Frame{Head: head, Payload: payload, typ: cmd.GetType()}, nil
}

// EncodeBytes frames an encoded command and a payload section, both copied into one new
// buffer (one allocation a frame; the caller's buffers may be reused at once).
func EncodeBytes(command, payload []byte) (Frame, error) {
	total := uint64(4+len(command)) + uint64(len(payload))
	if total > 1<<32-1 {
		return Frame{}, frame.ErrFrameTooLarge
	}
	b := make([]byte, frame.HeaderSize+len(command)+len(payload))
	binary.BigEndian.PutUint32(b, uint32(total))
	binary.BigEndian.PutUint32(b[4:], uint32(len(command)))
	copy(b[frame.HeaderSize:], command)
	copy(b[frame.HeaderSize+len(command):], payload)
	return Frame{Head: b[:frame.HeaderSize+len(command)], Payload: b[frame.HeaderSize+len(command):]}, nil
}

// Command is the frame's command bytes.
func (f Frame) Command() []byte { return f.Head[frame.HeaderSize:] }

// ErrQueueFull: a client's outbound queue went over its bound (a client that does not read
// what its consumers asked for).
var ErrQueueFull = errors.New("mux: client queue over its bound")

// OutQueue is a client's outbound queue: frames from the broker connection's reader, which
// must never wait for one client, written to the client by a goroutine of its own (Start).
// The writer waits for frames while the client is busy, and ends once the queue has been
// empty for writerIdle, so a quiet client holds no goroutine. Bounded in the bytes its
// frames hold (their buffers, see Frame.held), those its writer is writing included: a push
// over the bound fails and closes the queue.
type OutQueue struct {
	mu      sync.Mutex
	wake    *sync.Cond // a waiting writer: frames came, the queue closed, or retire fired
	frames  ring[Frame]
	bytes   int // what the frames hold (Frame.held), queued or being written
	inWrite int // what the frames the writer is writing hold: counted in bytes until written
	limit   int
	closed  bool
	err     error
	conn    net.Conn    // where the frames go, once started
	done    func(error) // told once, when the queue has ended
	writing bool        // a writer runs (it may be waiting for frames)
	ended   bool        // done was told
	w       batch       // the writer's
	active  int64       // when the writer last took frames (Unix nanoseconds)
	retire  *time.Timer // wakes a waiting writer to see whether the queue has been idle long enough
	armed   bool        // retire is set
}

// writerIdle is how long a queue's writer waits for frames before it ends.
const writerIdle = 100 * time.Millisecond

// NewOutQueue makes a queue bounded by limit bytes (<= 0: unbounded).
func NewOutQueue(limit int) *OutQueue {
	q := &OutQueue{limit: limit}
	q.wake = sync.NewCond(&q.mu)
	return q
}

// Push adds a frame without waiting. ErrQueueFull when it does not fit the bound; the queue
// is then closed (and ends without writing the rest).
func (q *OutQueue) Push(f Frame) error {
	return q.PushAll([]Frame{f})
}

// PushAll adds frames in order, with one wake of the writer: Push's, for a burst. The frames
// are the queue's either way: on an error those not queued are released.
func (q *OutQueue) PushAll(fs []Frame) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		ReleaseAll(fs)
		return q.err
	}
	for i, f := range fs {
		// A frame larger than the bound is taken when nothing else waits (what is being
		// written aside): a reading client gets a message over its bound, and the next.
		if q.limit > 0 && q.bytes+f.held() > q.limit && q.frames.Len() > 0 {
			q.closeLocked(ErrQueueFull)
			q.dropLocked() // never written: the client is disconnected
			ReleaseAll(fs[i:])
			return ErrQueueFull
		}
		q.frames.push(f)
		q.bytes += f.held()
	}
	q.startLocked()
	return nil
}

// dropLocked gives back the buffers of the frames not yet taken by the writer, and their
// room.
func (q *OutQueue) dropLocked() {
	for q.frames.Len() > 0 {
		q.frames.pop().Release()
	}
	q.frames, q.bytes = ring[Frame]{}, q.inWrite
}

// ReleaseAll releases frames that will not be written (see Frame.Release).
func ReleaseAll(fs []Frame) {
	for _, f := range fs {
		f.Release()
	}
}

// startLocked gets a writer going if the queue is started and has frames: the waiting one,
// or a new one.
func (q *OutQueue) startLocked() {
	switch {
	case q.conn == nil || q.frames.Len() == 0:
	case q.writing:
		q.wake.Signal()
	default:
		q.writing = true
		go q.write()
	}
}

// Bytes is what the queue's frames hold now (their buffers, see Frame.held).
func (q *OutQueue) Bytes() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.bytes
}

// Close ends the queue: once what is queued was written, done (Start) is told err.
func (q *OutQueue) Close(err error) {
	q.mu.Lock()
	q.closeLocked(err)
	end := q.endLocked()
	q.mu.Unlock()
	if end {
		q.done(err)
	}
}

func (q *OutQueue) closeLocked(err error) {
	if q.closed {
		return
	}
	q.closed, q.err = true, err
	q.wake.Broadcast()
}

// endLocked reports whether the queue ends now (closed, started, and no writer left to
// end it), and marks it ended.
func (q *OutQueue) endLocked() bool {
	if !q.closed || q.conn == nil || q.writing || q.ended {
		return false
	}
	q.ended = true
	if q.retire != nil {
		q.retire.Stop()
	}
	return true
}

// maxBatch bounds one vectored write, so the queue's lock is not held for a long take.
const maxBatch = 1 << 20

// Start writes the queue to c from now on, several frames per vectored write. done is told
// once: the error of a failed write, ErrQueueFull, or Close's error once what was queued
// was written. Written frames' buffers go back to their pool.
func (q *OutQueue) Start(c net.Conn, done func(error)) {
	q.mu.Lock()
	q.conn, q.done = c, done
	q.startLocked()
	end := q.endLocked()
	err := q.err
	q.mu.Unlock()
	if end {
		done(err)
	}
}

// write is the writer: it writes what is queued, waits for more while the client is busy,
// and ends when the queue is closed and written, or has been empty for writerIdle.
func (q *OutQueue) write() {
	for {
		q.mu.Lock()
		q.bytes -= q.inWrite // written
		q.inWrite = 0
		for q.frames.Len() == 0 && !q.closed && !q.idleLocked() {
			q.armRetireLocked()
			q.wake.Wait()
		}
		if q.frames.Len() == 0 || q.err == ErrQueueFull {
			q.writing = false
			q.shrinkLocked()
			end, err := q.endLocked(), q.err
			q.mu.Unlock()
			if end {
				q.done(err)
			}
			return
		}
		// What is being written stays counted: a client that does not read would otherwise
		// keep a stuck batch (up to maxBatch) besides a full queue.
		_, q.inWrite = q.w.take(&q.frames, maxBatch)
		q.active = time.Now().UnixNano()
		q.mu.Unlock()
		if err := q.w.write(q.conn); err != nil {
			q.mu.Lock()
			q.inWrite = 0 // released by the write
			q.closeLocked(err)
			q.dropLocked() // never written: nothing is held
			q.writing = false
			end := q.endLocked()
			q.mu.Unlock()
			if end {
				q.done(err)
			}
			return
		}
	}
}

// idleLocked reports whether the writer has taken nothing for writerIdle.
func (q *OutQueue) idleLocked() bool {
	return time.Now().UnixNano()-q.active >= int64(writerIdle)
}

// armRetireLocked makes sure a waiting writer is woken within writerIdle to look again.
func (q *OutQueue) armRetireLocked() {
	if q.armed {
		return
	}
	q.armed = true
	if q.retire == nil {
		q.retire = time.AfterFunc(writerIdle, q.fire)
		return
	}
	q.retire.Reset(writerIdle)
}

func (q *OutQueue) fire() {
	q.mu.Lock()
	q.armed = false
	q.wake.Broadcast()
	q.mu.Unlock()
}

// shrinkLocked lets go of slices an unusually large burst grew, as the writer ends, so a
// quiet client holds little.
func (q *OutQueue) shrinkLocked() {
	q.frames.shrink(idleFrames)
	if cap(q.w.frames) > idleFrames {
		q.w = batch{}
	}
}

// idleFrames is how many frames' room a quiet queue keeps (64 KiB of Frames).
const idleFrames = 1024

// batch is what one vectored write takes: the frames and their pieces. Its slices are kept
// from one write to the next (a writer's batch allocates only while it grows).
type batch struct {
	frames []Frame
	vec    [][]byte
	bufs   net.Buffers // vec, as the write consumes it
}

// take moves frames from the front of the queue into the batch, at least one and then as
// long as they fit limit bytes on the wire, and returns their size and what they held.
func (w *batch) take(frames *ring[Frame], limit int) (size, held int) {
	for frames.Len() > 0 && (size == 0 || size+frames.front().Size() <= limit) {
		f := frames.pop()
		w.appendPiece(f.Head)
		w.appendPiece(f.Payload)
		w.frames = append(w.frames, f)
		size += f.Size()
		held += f.held()
	}
	return size, held
}

// appendPiece adds p to the vectored write, as part of the last piece when it follows that
// one in memory (a frame's head and payload in one buffer, a chunk's frames).
func (w *batch) appendPiece(p []byte) {
	if len(p) == 0 {
		return
	}
	if n := len(w.vec); n > 0 {
		last := w.vec[n-1]
		if len(last)+len(p) <= cap(last) && &last[:len(last)+1][len(last)] == &p[0] {
			w.vec[n-1] = last[:len(last)+len(p)]
			return
		}
	}
	w.vec = append(w.vec, p)
}

// write writes the batch to c in one vectored write (several, if the kernel takes part),
// gives the frames' buffers back and empties the batch.
func (w *batch) write(c net.Conn) error {
	w.bufs = w.vec
	_, err := w.bufs.WriteTo(c)
	for _, f := range w.frames {
		f.Release()
	}
	clear(w.frames)
	clear(w.vec)
	w.frames, w.vec = w.frames[:0], w.vec[:0]
	return err
}
