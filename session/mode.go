package session

// sessionMode is what a session does once its handshake is done: a lookup connection
// (lookupSession), a direct session with a broker connection of its own (directSession), or
// one over a shared broker connection (multiplexed). The handshake returns one; run serves
// every mode the same way. A lookup session whose client uses the proxy as its broker becomes
// routed (routed.go) at its first such command; the handshake cannot tell.
//
//	accepted ──▶ handshake ──┬──▶ lookupSession ──┬─────────────┐
//	                         │         └──▶ routed ┘             │
//	                         ├──▶ directSession ─────────────────┼──▶ end (summary line)
//	                         └──▶ multiplexed ───────────────────┘
//
// A mode's serve hands its loop on to goroutines of its own, which park while the client is
// idle where they can (see idle.go); the handshake's goroutine, whose stack grew, then ends.
type sessionMode interface {
	// serve starts the mode. It returns why the session ends when it ended at once, or ""
	// when goroutines of the mode carry on: the last of them ends the session (session.end).
	serve() CloseReason
	// totals are what the mode forwarded, for the summary line.
	totals() totals
}

// totals are a session's counts for its summary line; a lookup connection forwards nothing.
type totals struct {
	multiplexed                            bool
	bytesIn, bytesOut, framesIn, framesOut uint64
}
