package session

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// A session reads its commands (handshake, lookup mode) through a small buffer, which grows
// once, to maxCommandSize, for the rare command that needs more (a CONNECT with a large
// token): every connection pays for the small one, idle lookup connections included.
const (
	commandBufferSize = 4 << 10
	maxCommandSize    = 32 << 10
)

// errCommandTooLarge: a command (not its payload) larger than maxCommandSize. Real commands
// are a few hundred bytes, tokens a few KiB; only an attacker sends more.
var errCommandTooLarge = errors.New("command too large")

// wire is one socket of a session with its read buffer. Frames are peeked out of the buffer,
// so switching from reading commands (handshake, lookup mode) to forwarding raw frames
// (direct mode) loses no byte the peer already sent.
type wire struct {
	conn     net.Conn
	r        *bufio.Reader
	maxFrame int

	wmu sync.Mutex // writers of decoded commands (lookup mode answers from several goroutines)
}

func newWire(c net.Conn, maxFrame int) *wire {
	return &wire{conn: c, r: bufio.NewReaderSize(c, commandBufferSize), maxFrame: maxFrame}
}

// readCommand reads one whole frame and decodes its command; any payload is skipped.
func (w *wire) readCommand() (*pb.BaseCommand, error) {
	hdr, err := w.r.Peek(frame.HeaderSize)
	if err != nil {
		if len(hdr) > 0 && errors.Is(err, io.EOF) {
			return nil, io.ErrUnexpectedEOF
		}
		return nil, err
	}
	total, cmdSize, err := frame.ParseHeader(hdr, w.maxFrame)
	if err != nil {
		return nil, err
	}
	cmdEnd := frame.HeaderSize + int(cmdSize)
	if cmdEnd > maxCommandSize {
		return nil, fmt.Errorf("%w: %d bytes", errCommandTooLarge, cmdSize)
	}
	if cmdEnd > w.r.Size() {
		w.growReader()
	}
	b, err := w.r.Peek(cmdEnd)
	if err != nil {
		return nil, eofIsUnexpected(err)
	}
	cmd, err := frame.Decode(b[frame.HeaderSize:])
	if err != nil {
		return nil, err
	}
	if _, err := w.r.Discard(4 + int(total)); err != nil {
		return nil, eofIsUnexpected(err)
	}
	return cmd, nil
}

// growReader moves to a reader that holds any command, keeping the bytes already read. The
// next Peek reads past them (the command is longer), so none stay behind in the chain.
func (w *wire) growReader() {
	buffered, _ := w.r.Peek(w.r.Buffered())
	head := bytes.Clone(buffered)
	w.r = bufio.NewReaderSize(io.MultiReader(bytes.NewReader(head), w.conn), maxCommandSize)
}

// writeCommand sends one command, bounded by timeout so a client that stops reading cannot
// pin a goroutine forever.
func (w *wire) writeCommand(cmd *pb.BaseCommand, timeout time.Duration) error {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	w.conn.SetWriteDeadline(time.Now().Add(timeout))
	defer w.conn.SetWriteDeadline(time.Time{})
	return frame.WriteCommand(w.conn, cmd)
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
