package session

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/idlewait"
	"github.com/pulsar-proxy/pulsar-proxy/mux"
)

// queuedClient is the client's side of a session whose broker frames come from shared broker
// connections (multiplexed and routed sessions): a queue to the client, written by a goroutine
// of its own (the connections' readers never wait for one client), the loop that reads the
// client, and what went each way.
type queuedClient struct {
	s          *session
	out        *mux.OutQueue
	bound      int        // the queue's bound, in bytes its frames hold
	writerDone chan error // the queue's writer has ended

	// idle parks the client's socket once it has been quiet for idleAfter, and its reader
	// ends (readClient reports it parked); nil: the reader waits on its goroutine.
	idle       *idlewait.Waiter
	idleUntil  int64         // the idle read deadline set (Unix nanoseconds); 0: none
	parkedAt   int64         // when the socket was last parked (Unix nanoseconds); 0: not parked
	quietParks atomic.Uint64 // parks at once of a quiet client (see quietAfter)

	bytesIn, bytesOut   atomic.Uint64
	framesIn, framesOut atomic.Uint64
	// the direct-session series (pulsar_proxy_frames_total, _bytes_total), by direction
	upFrames, upBytes, downFrames, downBytes prometheus.Counter
}

func newQueuedClient(s *session, bound int) *queuedClient {
	m := s.srv.metrics
	return &queuedClient{s: s, out: mux.NewOutQueue(bound), bound: bound,
		upFrames: m.frames.WithLabelValues(toBroker), upBytes: m.bytes.WithLabelValues(toBroker),
		downFrames: m.frames.WithLabelValues(toClient), downBytes: m.bytes.WithLabelValues(toClient)}
}

// startWriter starts writing the queue to the client (its goroutine ends while the client
// is quiet); a failed write closes the session's connection.
func (q *queuedClient) startWriter() {
	q.writerDone = make(chan error, 1)
	q.out.Start(q.s.client.conn, func(err error) {
		if err != nil {
			q.s.conn.Close()
			q.s.client.wake() // a parked reader sleeps through a close
		}
		q.writerDone <- err
	})
}

// finishWriter lets the queue empty (within the handshake timeout) and closes the session's
// connection.
func (q *queuedClient) finishWriter() {
	q.out.Close(nil)
	q.s.client.conn.SetWriteDeadline(time.Now().Add(q.s.srv.cfg.HandshakeTimeout))
	<-q.writerDone
	q.s.conn.Close()
}

// push queues frames for the client, in order; over the queue's bound the client is
// disconnected as a slow consumer.
func (q *queuedClient) push(fs ...mux.Frame) error {
	if err := q.out.PushAll(fs); err != nil {
		if errors.Is(err, mux.ErrQueueFull) {
			// Its writer may be stuck in a write the client does not read: close the socket.
			q.s.with(q.s.srv.log.Info()).Int("bound_bytes", q.bound).Msg("client does not read what its consumers asked for; disconnecting it (slow consumer)")
			abortive(q.s.client.conn)
			q.s.close(ReasonSlowConsumer)
		}
		return err
	}
	size := 0
	for _, f := range fs {
		size += f.Size()
	}
	q.bytesOut.Add(uint64(size))
	q.framesOut.Add(uint64(len(fs)))
	q.downBytes.Add(float64(size))
	q.downFrames.Add(float64(len(fs)))
	return nil
}

// pushSorted queues a broker's frames for the client in order, in as few pushes as it can:
// a frame special picks is queued by own (a topic list to filter, a close to rewrite), the
// runs between by push.
func (q *queuedClient) pushSorted(fs []mux.Frame, special func(mux.Frame) bool, own func(mux.Frame) error) error {
	from := 0
	for i, f := range fs {
		if !special(f) {
			continue
		}
		if err := q.push(fs[from:i]...); err != nil {
			mux.ReleaseAll(fs[i:])
			return err
		}
		if err := own(f); err != nil {
			mux.ReleaseAll(fs[i+1:])
			return err
		}
		from = i + 1
	}
	return q.push(fs[from:]...)
}

// inject queues one of the proxy's own commands for the client (nil: nothing).
func (q *queuedClient) inject(cmd *pb.BaseCommand) error {
	if cmd == nil {
		return nil
	}
	f, err := mux.Encode(cmd, nil)
	if err != nil {
		return err
	}
	return q.push(f)
}

// readClient reads the client's frames until it goes away or handle ends the session
// (the reason), or it has been quiet for idleAfter (or is a quiet client, see quietAfter)
// and its socket is parked (parked: the waiter's callback reads on).
func (q *queuedClient) readClient(handle func(frame.Frame) CloseReason) (reason CloseReason, parked bool) {
	s := q.s
	if q.idle != nil {
		// A publisher's many small frames: a read per burst. Only where a quiet client's
		// socket is parked: the park gives the burst's buffer back.
		s.client.r.ReadBursts()
	}
	quiet, handled := q.quietSincePark(), false
	for {
		if quiet && handled {
			if s.client.r.Drained() {
				q.quietParks.Add(1)
				if q.park() {
					return "", true
				}
			}
			quiet = false // more is coming: read on as a busy client is read
		}
		q.armIdle()
		fr, err := s.client.r.ReadFrame()
		if err != nil {
			if s.draining() && isTimeout(err) {
				return ReasonDrained, false
			}
			if q.idleUntil != 0 && isTimeout(err) {
				if q.park() {
					return "", true
				}
				continue // the idle deadline came in the middle of a frame: read the rest
			}
			if frame.IsFrameError(err) { // told through the queue: its writer owns the socket
				q.inject(frame.Error(0, pb.ServerError_NotAllowedError, "pulsar-proxy: bad frame: "+err.Error()))
				return ReasonBadFrame, false
			}
			return s.readFailure(err), false
		}
		n := len(fr.Command) + len(fr.Payload) + frame.HeaderSize
		q.bytesIn.Add(uint64(n))
		q.framesIn.Add(1)
		q.upBytes.Add(float64(n))
		q.upFrames.Inc()
		if reason := handle(fr); reason != "" {
			return reason, false
		}
		handled = true
	}
}

// idleAfter is how long a multiplexed client may be quiet before its socket is parked (and
// its reader's goroutine ends); a busy client pays a deadline now and then, not a wake-up
// per burst.
const idleAfter = 100 * time.Millisecond

// quietAfter: a client whose socket was parked this long before its input came is a quiet
// one (a message every few seconds); once what it sent is handled, and the read that brought
// it took all there was, its socket is parked at once rather than after idleAfter (no wait
// for the deadline to fire, no goroutine held meanwhile).
const quietAfter = 10 * idleAfter

// quietSincePark reports whether the reader was woken after the socket had been parked for
// quietAfter or more, and forgets when it was parked.
func (q *queuedClient) quietSincePark() bool {
	at := q.parkedAt
	q.parkedAt = 0
	return at != 0 && time.Now().UnixNano()-at >= int64(quietAfter)
}

// armIdle, when the reader has nothing buffered, makes sure a read deadline idleAfter away
// is set: the read that follows ends there and the socket is parked. It is moved only once
// half of it has gone.
func (q *queuedClient) armIdle() {
	if q.idle == nil || len(q.s.client.r.Buffered()) > 0 {
		return
	}
	now := time.Now().UnixNano()
	if q.idleUntil-now > int64(idleAfter/2) {
		return
	}
	if err := q.idle.Failed(); err != nil { // the poller's lock: asked as the deadline moves
		q.s.with(q.s.srv.log.Warn()).Err(err).Msg("the idle poller refused a socket (fs.epoll.max_user_watches?); its session waits on a goroutine")
		q.idle = nil
		return
	}
	q.idleUntil = now + int64(idleAfter)
	q.s.setReadDeadline(time.Unix(0, q.idleUntil))
}

// park clears the idle deadline and parks the socket, its reader's buffer given back. With
// part of a frame buffered it does not park: the reader keeps what arrived in a buffer that
// just holds it (a client that stalls in the middle of a frame holds no burst's room), and
// the deadline is set again, so that a stall that follows more bytes is met the same way.
func (q *queuedClient) park() bool {
	r := q.s.client.r
	if len(r.Buffered()) > 0 {
		r.Shrink()
		q.idleUntil = time.Now().Add(idleAfter).UnixNano()
		q.s.setReadDeadline(time.Unix(0, q.idleUntil))
		return false
	}
	if q.idleUntil != 0 {
		q.idleUntil = 0
		q.s.setReadDeadline(time.Time{}) // a drain's stays
	}
	r.Release()
	q.parkedAt = time.Now().UnixNano()
	q.idle.Park()
	return true
}

func (q *queuedClient) totals() totals {
	return totals{multiplexed: true, bytesIn: q.bytesIn.Load(), framesIn: q.framesIn.Load(),
		bytesOut: q.bytesOut.Load(), framesOut: q.framesOut.Load()}
}
