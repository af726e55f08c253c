package session

import (
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

// stalls are the marks of one direct session, on the server's watch list while it forwards.
type stalls struct {
	clientPartial forward.Mark // the client's half-sent frame waits for its rest
	clientNotRead forward.Mark // a write to the client has not returned
	brokerPartial forward.Mark
	brokerNotRead forward.Mark
	sess          *session
	broker        *wire // closed with the client's socket when stuck
}

// watch puts a direct session's marks on the watchdog's list until the session ends.
func (s *Server) watch(st *stalls) {
	s.mu.Lock()
	s.watched[st] = struct{}{}
	s.mu.Unlock()
	st.sess.atEnd(func() {
		s.mu.Lock()
		delete(s.watched, st)
		s.mu.Unlock()
	})
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
			var stuck []*stalls
			var reasons []CloseReason
			s.mu.Lock()
			for st := range s.watched {
				if r := st.check(now, timeout); r != "" {
					stuck, reasons = append(stuck, st), append(reasons, r)
				}
			}
			s.mu.Unlock()
			for i, st := range stuck {
				s.metrics.stalled.WithLabelValues(string(reasons[i])).Inc()
				st.sess.close(reasons[i])
				st.broker.close() // a write to a broker that stopped reading fails only so
			}
		}
	}
}
