package session

import (
	"errors"
	"net"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/internal/idlewait"
)

// Idle sessions hold no goroutine. A socket with nothing to read is parked on the server's
// poller (idlewait), and its owner goes on, on a fresh goroutine, once input arrives or it
// is woken: by a close of the socket, a drain, or a keep-alive that is due. Whatever
// closes a session's socket or moves its read deadline therefore wakes it too (wire.close,
// wire.wake): a parked socket would sleep through both, as no read is waiting on it.
//
// A lookup session parks as soon as it waits (its commands are few). A direct session's
// pipe parks only once its source has been quiet for idleAfter: a busy stream waits on its
// goroutine as before and pays no extra wake-up per burst.
const idleAfter = 100 * time.Millisecond

// errParked ends a pipe's run while its source is parked; the pipe resumes later.
var errParked = errors.New("parked while idle")

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

// parkWhenIdle lets the pipe park its source after idleAfter without input; resume carries
// on (pipe.resume) on a fresh goroutine.
func (p *pipe) parkWhenIdle(s *session, client bool, resume func()) {
	p.idle = s.parker(p.src, resume)
	p.sess, p.client = s, client
}

// armIdle, when the source has nothing to read, makes sure a read deadline idleAfter away
// is set: the wait that follows ends there and the pipe parks (waitIdle). It is moved only
// when half of it has gone, so a busy source costs a deadline now and then.
//
// Not while part of a frame is held: the rest must come (the stall watchdog bounds that
// wait), and a deadline would only wake the pipe every idleAfter to wait again. Not either
// when the poller refused the source: the pipe then waits on its goroutine.
func (p *pipe) armIdle() {
	if p.idle == nil || p.start != p.end || p.idleRefused() {
		return
	}
	now := time.Now().UnixNano()
	if p.idleUntil-now > int64(idleAfter/2) {
		return
	}
	p.idleUntil = now + int64(idleAfter)
	p.setSrcDeadline(time.Unix(0, p.idleUntil))
}

// idleRefused reports (and logs, once for the pipe) that the poller refused the source.
func (p *pipe) idleRefused() bool {
	if p.refused {
		return true
	}
	err := p.idle.Failed()
	if err == nil {
		return false
	}
	p.refused = true
	p.sess.with(p.sess.srv.log.Warn()).Err(err).Msg("the idle poller refused a socket (fs.epoll.max_user_watches?); its session waits on a goroutine")
	return true
}

// disarmIdle clears the idle deadline before reads that must not time out (the rest of a
// frame).
func (p *pipe) disarmIdle() {
	if p.idleUntil != 0 {
		p.idleUntil = 0
		p.setSrcDeadline(time.Time{})
	}
}

// waitIdle acts on a failed wait for the source. The idle deadline's time-out parks the pipe
// (errParked) when it holds nothing and mayPark, or lets the wait go on (nil); any other
// error (a drain's time-out among them) is returned.
func (p *pipe) waitIdle(err error, mayPark bool) error {
	if p.idle == nil || p.idleUntil == 0 || !isTimeout(err) || (p.client && p.sess.draining()) {
		return err
	}
	p.disarmIdle()
	if !mayPark || p.start != p.end {
		return nil
	}
	p.idle.Park()
	return errParked
}

// setSrcDeadline sets the source's read deadline; the client's keeps a drain's (see
// session.setReadDeadline).
func (p *pipe) setSrcDeadline(t time.Time) {
	if p.client {
		p.sess.setReadDeadline(t)
		return
	}
	p.src.conn.SetReadDeadline(t)
}
