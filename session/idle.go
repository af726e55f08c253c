package session

import (
	"net"

	"github.com/pulsar-proxy/pulsar-proxy/forward"
	"github.com/pulsar-proxy/pulsar-proxy/internal/idlewait"
)

// Idle sessions hold no goroutine. A socket with nothing to read is parked on the server's
// poller (idlewait), and its owner goes on, on a fresh goroutine, once input arrives or it
// is woken: by a close of the socket, a drain, or a keep-alive that is due. Whatever
// closes a session's socket or moves its read deadline therefore wakes it too (wire.close,
// wire.wake): a parked socket would sleep through both, as no read is waiting on it.
//
// A lookup session parks as soon as it waits (its commands are few). A direct session's
// pipes park only once their source has been quiet for a while (forward.Idle): a busy
// stream waits on its goroutine and pays no extra wake-up per burst.

// wake ends a park of the wire's socket, if any, so that its owner reads and sees what
// changed.
func (w *wire) wake() {
	if iw := w.idle.Load(); iw != nil {
		iw.Wake()
	}
}

// close closes the socket and wakes whoever parked it.
func (w *wire) close() {
	w.conn.Close()
	w.wake()
}

// parker makes a waiter for the wire's socket on the server's poller, or nil where waits
// keep their goroutine (no poller, or no descriptor: TLS).
func (s *session) parker(w *wire, resume func()) *idlewait.Waiter {
	if s.srv.idle == nil {
		return nil
	}
	tc, ok := w.conn.(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	iw := s.srv.idle.NewWaiter(rc, resume)
	w.idle.Store(iw)
	return iw
}

// idleFor lets a direct session's pipe park its source (w) while it is quiet; resume carries
// on (forward.Pipe.Resume) on a fresh goroutine. The client's source keeps a drain's read
// deadline over the pipe's idle one, and a drain's time-out is the pipe's stop. nil: the pipe
// waits on its goroutine.
func (s *session) idleFor(w *wire, client bool, resume func()) *forward.Idle {
	iw := s.parker(w, resume)
	if iw == nil {
		return nil
	}
	idle := &forward.Idle{Waiter: iw, Refused: func(err error) {
		s.with(s.srv.log.Warn()).Err(err).Msg("the idle poller refused a socket (fs.epoll.max_user_watches?); its session waits on a goroutine")
	}}
	if client {
		idle.SetDeadline, idle.Stopped = s.setReadDeadline, s.draining
	}
	return idle
}
