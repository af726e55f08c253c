package forward

import (
	"errors"
	"net"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/internal/idlewait"
)

// Idle pipes hold no goroutine. A pipe whose source has been quiet for idleAfter parks the
// source on the server's poller (idlewait) and its Run or Resume returns ErrParked; the
// waiter calls Resume again, on a fresh goroutine, once input arrives or it is woken (a
// close of the socket, a stop). A busy stream waits on its goroutine and pays no extra
// wake-up per burst.
//
// A read deadline carries the idle wait: armed idleAfter ahead while the source has nothing
// to read, it ends the wait that follows, and the pipe parks. The source's owner may use the
// same deadline to stop the pipe (a session's drain sets it in the past): Idle.Stopped tells
// the two apart, so a stop's time-out is returned, not parked on.
const idleAfter = 100 * time.Millisecond

// ErrParked ends a pipe's Run or Resume while its source is parked; the pipe resumes later.
var ErrParked = errors.New("parked while idle")

// Idle is how a pipe parks its source.
type Idle struct {
	Waiter *idlewait.Waiter // parks the source; its callback calls Resume
	// SetDeadline sets the source's read deadline (a session keeps a stop's deadline over
	// it); nil: the source's own SetReadDeadline.
	SetDeadline func(time.Time)
	// Stopped reports whether a time-out of the source is its owner's stop rather than the
	// idle deadline; nil: never.
	Stopped func() bool
	// Refused is told, once, that the poller refused the source: the pipe then waits on its
	// goroutine. nil: not told.
	Refused func(error)
}

// armIdle, when the source has nothing to read, makes sure a read deadline idleAfter away
// is set: the wait that follows ends there and the pipe parks (waitIdle). It is moved only
// when half of it has gone, so a busy source costs a deadline now and then.
//
// Not while part of a frame is held: the rest must come (the stall watchdog bounds that
// wait), and a deadline would only wake the pipe every idleAfter to wait again. Not either
// when the poller refused the source: the pipe then waits on its goroutine.
func (p *Pipe) armIdle() {
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

// idleRefused reports (and tells, once for the pipe) that the poller refused the source.
func (p *Pipe) idleRefused() bool {
	if p.refused {
		return true
	}
	err := p.idle.Waiter.Failed()
	if err == nil {
		return false
	}
	p.refused = true
	if p.idle.Refused != nil {
		p.idle.Refused(err)
	}
	return true
}

// disarmIdle clears the idle deadline before reads that must not time out (the rest of a
// frame).
func (p *Pipe) disarmIdle() {
	if p.idleUntil != 0 {
		p.idleUntil = 0
		p.setSrcDeadline(time.Time{})
	}
}

// waitIdle acts on a failed wait for the source. The idle deadline's time-out parks the pipe
// (ErrParked) when it holds nothing and mayPark, or lets the wait go on (nil); any other
// error (a stop's time-out among them) is returned.
func (p *Pipe) waitIdle(err error, mayPark bool) error {
	if p.idle == nil || p.idleUntil == 0 || !isTimeout(err) || (p.idle.Stopped != nil && p.idle.Stopped()) {
		return err
	}
	p.disarmIdle()
	if !mayPark || p.start != p.end {
		return nil
	}
	p.idle.Waiter.Park()
	return ErrParked
}

// setSrcDeadline sets the source's read deadline, through the owner where it keeps its own.
func (p *Pipe) setSrcDeadline(t time.Time) {
	if p.idle.SetDeadline != nil {
		p.idle.SetDeadline(t)
		return
	}
	p.src.SetReadDeadline(t)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
