package session

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/idlewait"
	"github.com/pulsar-proxy/pulsar-proxy/mux"
)

// wire is one socket of a session: its reader of commands (the handshake, lookup mode), and
// its writer of commands. When the session starts forwarding frames, the pipe takes what the
// reader read ahead (takeReadAhead), so no byte the peer already sent is lost.
type wire struct {
	conn net.Conn
	r    *frame.Reader                   // nil once a pipe took over
	raw  syscall.RawConn                 // a TCP conn's descriptor, to wait for input holding nothing (awaitInput); nil otherwise
	idle atomic.Pointer[idlewait.Waiter] // parks the socket while idle (see idle.go); nil: waits hold a goroutine

	wmu sync.Mutex // writers of decoded commands (lookup mode answers from several goroutines)
	// queue, once set (a routed session's), owns the writes: commands go through it, so that
	// none is written between the halves of one of its frames.
	queue atomic.Pointer[mux.OutQueue]
}

func newWire(c net.Conn, limits frame.Limits) *wire {
	w := &wire{conn: c, r: limits.Reader(c)}
	if tc, ok := c.(*net.TCPConn); ok {
		w.raw, _ = tc.SyscallConn()
	}
	return w
}

// awaitInput returns once the peer has sent something, its read deadline has passed or it is
// gone, whichever comes first; the read that follows reports which. While it waits the
// wire holds no buffer and its goroutine only the caller's frames. Without a descriptor
// (TLS) it returns at once and the read that follows does the waiting.
func (w *wire) awaitInput() error {
	if w.raw == nil || len(w.r.Buffered()) > 0 {
		return nil
	}
	return w.raw.Read(inputReady)
}

// hasBuffered reports whether the reader holds bytes read ahead (a parked socket would not
// report them).
func (w *wire) hasBuffered() bool { return len(w.r.Buffered()) > 0 }

// releaseIdle gives the reader's buffer back when nothing unread is in it.
func (w *wire) releaseIdle() {
	w.r.Release()
}

// readCommand reads one whole frame and decodes its command; any payload is skipped.
func (w *wire) readCommand() (*pb.BaseCommand, error) {
	return w.r.ReadCommand()
}

// takeReadAhead hands over the bytes the reader read past the last command and drops the
// reader (and its buffer).
func (w *wire) takeReadAhead() []byte {
	if w.r == nil {
		return nil
	}
	head := w.r.Buffered()
	w.r = nil
	return head
}

// writeCommand sends one command, bounded by timeout so a client that stops reading cannot
// pin a goroutine forever.
func (w *wire) writeCommand(cmd *pb.BaseCommand, timeout time.Duration) error {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	if q := w.queue.Load(); q != nil {
		f, err := mux.Encode(cmd, nil)
		if err != nil {
			return err
		}
		return q.Push(f)
	}
	w.conn.SetWriteDeadline(time.Now().Add(timeout))
	defer w.conn.SetWriteDeadline(time.Time{})
	return frame.WriteCommand(w.conn, cmd)
}

// writeThrough makes q the only writer of the socket from now on: a write in progress
// finishes first, every later one is queued.
func (w *wire) writeThrough(q *mux.OutQueue) {
	w.wmu.Lock()
	w.queue.Store(q)
	w.wmu.Unlock()
}

func eofIsUnexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
