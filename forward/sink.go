package forward

import (
	"net"
	"sync"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// Sink is the write side of one socket of a forwarding session. Forwarded frames and frames
// the proxy itself injects (answers to commands it refuses) both go through it, whole frames
// at a time under mu, so they never interleave mid-frame. It has no buffer of its own: a pipe
// writes straight out of its read buffer.
type Sink struct {
	mu      sync.Mutex
	conn    net.Conn
	notRead *Mark  // set while a write has not returned; nil: not watched
	onClose func() // closes the socket and wakes its parked reader; nil: conn.Close
}

// NewSink is the write side of c. close, when not nil, is how the socket is closed (a
// session's socket whose parked reader must be woken as it closes).
func NewSink(c net.Conn, close func()) *Sink {
	return &Sink{conn: c, onClose: close}
}

// WatchWrites sets the mark a write holds while it has not returned (the stall watchdog's
// "not reading"); call it before the sink is used.
func (s *Sink) WatchWrites(m *Mark) { s.notRead = m }

// Close closes the socket.
func (s *Sink) Close() {
	if s.onClose != nil {
		s.onClose()
		return
	}
	s.conn.Close()
}

// Inject writes one command frame.
func (s *Sink) Inject(cmd *pb.BaseCommand) error {
	b, err := frame.AppendCommand(nil, cmd)
	if err != nil {
		return err
	}
	return s.Write(b)
}

// Write writes one whole frame.
func (s *Sink) Write(b []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writeLocked(b)
}

// writeLocked writes b, the caller holding mu, marking the write for the stall watchdog.
func (s *Sink) writeLocked(b []byte) error {
	if s.notRead != nil {
		s.notRead.Begin()
		defer s.notRead.End()
	}
	_, err := s.conn.Write(b)
	return err
}
