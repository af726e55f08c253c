package sni

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/forward"
)

// relay is a relayed connection's two directions, each a forward.Pipe over the bare sockets
// (unframed: the kernel moves the TLS records socket to socket, splice(2)). The first
// direction to end decides how the connection ends (firstEnd).
type relay struct {
	c        *conn
	broker   *net.TCPConn
	up, down *forward.Pipe
	downDone chan struct{} // closed when the broker's direction has ended

	first  sync.Once
	reason Reason
	stuck  *time.Timer // closes a connection whose other side never finishes a half-close
}

// startRelay starts both directions, each on a goroutine of its own; the client's ends the
// connection. An idle direction parks its socket and holds no goroutine.
func (c *conn) startRelay(broker *net.TCPConn) {
	m := c.srv.m
	r := &relay{c: c, broker: broker, downDone: make(chan struct{})}
	up := forward.Config{Src: c.client, Dst: forward.NewSink(broker, nil), Unframed: true,
		Frames: m.frames, Bytes: m.bytes.WithLabelValues(toBroker), Buffers: c.srv.buffers,
		Idle: c.idleFor(c.client, true, r.resumeUp)}
	down := forward.Config{Src: broker, Dst: forward.NewSink(c.client, nil), Unframed: true,
		Frames: m.frames, Bytes: m.bytes.WithLabelValues(toClient), Buffers: c.srv.buffers,
		Idle: c.idleFor(broker, false, r.resumeDown)}
	r.up, r.down = forward.New(up), forward.New(down)
	c.mu.Lock()
	c.relay = r
	c.relaying = true
	c.mu.Unlock()
	c.setReadDeadline(time.Time{}) // the handshake's; a drain's stays
	go r.runDown()
	go r.runUp()
}

// idleFor lets a pipe park its source while it is quiet. The client's source keeps a drain's
// read deadline over the pipe's idle one, and a drain's time-out is its stop.
func (c *conn) idleFor(src *net.TCPConn, client bool, resume func()) *forward.Idle {
	w := c.parker(src, resume)
	if w == nil {
		return nil
	}
	idle := &forward.Idle{Waiter: w, Refused: func(err error) {
		c.log(c.srv.cfg.Log.Warn()).Err(err).Msg("the idle poller refused a socket (fs.epoll.max_user_watches?); its SNI relay waits on a goroutine")
	}}
	if client {
		idle.SetDeadline, idle.Stopped = c.setReadDeadline, c.drained.Load
	}
	return idle
}

func (r *relay) runDown()    { r.downEnded(r.down.Run()) }
func (r *relay) resumeDown() { r.downEnded(r.down.Resume()) }

func (r *relay) downEnded(err error) {
	if err == forward.ErrParked {
		return
	}
	defer close(r.downDone)
	r.end(false, err)
}

func (r *relay) runUp()    { r.upEnded(r.up.Run()) }
func (r *relay) resumeUp() { r.upEnded(r.up.Resume()) }

// upEnded ends the connection once the client's direction has ended (not parked).
func (r *relay) upEnded(err error) {
	if err == forward.ErrParked {
		return
	}
	r.end(true, err)
	r.c.end(r.finish())
}

func (r *relay) end(up bool, err error) {
	r.first.Do(func() {
		r.reason = r.firstEnd(up, err)
		if !up {
			r.stuck = time.AfterFunc(halfCloseWait, func() { r.c.close(ReasonBrokerClosed) })
		}
	})
}

// firstEnd acts on the first direction to end: a clean end is passed on as a half-close
// (TLS's close_notify and whatever follows it still arrive); a drain lets the broker's side
// settle before both close; any other failure closes both at once.
func (r *relay) firstEnd(up bool, err error) Reason {
	c := r.c
	switch {
	case up && c.drained.Load() && isTimeout(err):
		settle(r.down.Bytes)
		c.close(ReasonDrained)
		return ReasonDrained
	case up && errors.Is(err, io.EOF):
		r.broker.CloseWrite()
		return ReasonClientClosed
	case !up && errors.Is(err, io.EOF):
		c.client.CloseWrite()
		return ReasonBrokerClosed
	}
	c.close(ReasonIOError)
	return ReasonIOError
}

// finish waits for the broker's direction once the client's has ended.
func (r *relay) finish() Reason {
	select {
	case <-r.downDone:
	case <-time.After(halfCloseWait):
		r.c.close(r.reason)
		<-r.downDone
	}
	if r.stuck != nil {
		r.stuck.Stop()
	}
	return r.reason
}

// A draining relay waits for the broker's side to settle: until it has sent nothing for
// settleQuiet, at most settleMax, as the framed sessions do (session.settle): answers to what
// the client sent arrive within a broker round trip.
const (
	settleQuiet = 500 * time.Millisecond
	settleMax   = 3 * time.Second
)

func settle(moved func() uint64) {
	deadline := time.Now().Add(settleMax)
	last, quietSince := moved(), time.Now()
	for time.Now().Before(deadline) && time.Since(quietSince) < settleQuiet {
		time.Sleep(settleQuiet / 8)
		if n := moved(); n != last {
			last, quietSince = n, time.Now()
		}
	}
}
