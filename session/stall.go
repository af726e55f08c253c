package session

import (
	"sync/atomic"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/forward"
)

// A direct session can stall on a peer that stops: a client that sends part of a frame and
// nothing more, or one that stops reading while its broker sends (and likewise a broker).
// Nothing times such a session out by itself: the pipes block in a read or a write, and TCP
// keeps the connection up. A watchdog looks at every session a few times per
// session.stallTimeout and closes those that have been stuck that long, with a reason that
// says which way. It costs a pipe two atomic stores per write and none per frame (the marks
// are forward.Mark).

// stalls are the marks of one direct session.
type stalls struct {
	clientPartial forward.Mark // the client's half-sent frame waits for its rest
	clientNotRead forward.Mark // a write to the client has not returned
	brokerPartial forward.Mark
	brokerNotRead forward.Mark
	watched       atomic.Bool          // the session forwards: the watchdog looks at it
	broker        atomic.Pointer[wire] // closed with the client's socket when stuck
}

// check returns why the session is stuck beyond timeout, or "".
func (st *stalls) check(now time.Time, timeout time.Duration) CloseReason {
	switch {
	case st.clientPartial.StuckFor(now) > timeout:
		return ReasonClientStalled
	case st.clientNotRead.StuckFor(now) > timeout:
		return ReasonClientNotReading
	case st.brokerPartial.StuckFor(now) > timeout, st.brokerNotRead.StuckFor(now) > timeout:
		return ReasonBrokerStalled
	}
	return ""
}

// watchStalls closes stuck direct sessions until stop is closed.
func (s *Server) watchStalls(stop <-chan struct{}) {
	timeout := s.cfg.StallTimeout
	t := time.NewTicker(max(timeout/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			var stuck []*session
			var reasons []CloseReason
			s.mu.Lock()
			for sess := range s.sessions {
				if st := &sess.stalls; st.watched.Load() {
					if r := st.check(now, timeout); r != "" {
						stuck, reasons = append(stuck, sess), append(reasons, r)
					}
				}
			}
			s.mu.Unlock()
			for i, sess := range stuck {
				s.metrics.stalled.WithLabelValues(string(reasons[i])).Inc()
				sess.close(reasons[i])
				if b := sess.stalls.broker.Load(); b != nil {
					b.close() // a write to a broker that stopped reading fails only so
				}
			}
		}
	}
}
