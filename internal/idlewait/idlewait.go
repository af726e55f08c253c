// Package idlewait waits for many idle sockets at once on one goroutine, so that a
// connection with nothing to read holds no goroutine (and no goroutine stack) of its own:
// its owner parks it here and is called back on a fresh goroutine once input arrives, or
// when it is woken.
package idlewait

import (
	"errors"
	"sync"
	"syscall"
)

// Poller holds the parked sockets. A nil *Poller parks nothing: New fails where the
// platform has no way to wait for many sockets at once.
type Poller struct {
	mu     sync.Mutex
	parked map[uint64]*Waiter // by token
	next   uint64             // the last token given out
	closed bool
	epoll  // the platform's part
}

// Waiter is one socket's place in a Poller.
type Waiter struct {
	p      *Poller
	rc     syscall.RawConn
	wake   func()
	token  uint64 // while parked: its key in p.parked; 0 otherwise
	kicked bool   // woken while not parked: the next Park wakes at once
	armed  bool   // the socket is in the epoll set (oneshot: disarmed after each event)
	failed error  // the poller could not take the socket (ENOSPC, ENOMEM): do not park again
}

var errUnsupported = errors.New("idlewait: not supported on this platform")

// NewWaiter prepares rc's socket to be parked; wake is run on a fresh goroutine each time a
// Park ends (input, end of stream or error on the socket, or Wake).
func (p *Poller) NewWaiter(rc syscall.RawConn, wake func()) *Waiter {
	return &Waiter{p: p, rc: rc, wake: wake}
}

// Park returns at once; wake runs later, once: when the socket has input, an end or an
// error, or when Wake is called, whichever is first. A Wake that came while the waiter was
// not parked makes this Park wake at once, so a close or a deadline that happened while the
// owner was busy is not slept through. What wakes the owner must be re-checked by it (a
// read): a wake says only that something may have happened.
func (w *Waiter) Park() {
	p := w.p
	p.mu.Lock()
	if w.kicked || p.closed {
		w.kicked = false
		p.mu.Unlock()
		go w.wake()
		return
	}
	p.next++
	w.token = p.next
	p.parked[w.token] = w
	// Armed under the lock: two arms of one socket must not reorder (the later token wins).
	var err error
	if cerr := w.rc.Control(func(fd uintptr) { err = p.arm(int(fd), w.token, w.armed) }); cerr != nil {
		err = cerr
	}
	if err == nil {
		w.armed = true
		p.mu.Unlock()
		return
	}
	// Closed meanwhile (the owner's read reports it), or the poller refused the socket: its
	// owner then waits on a goroutine again (Failed).
	delete(p.parked, w.token)
	w.token = 0
	if cerr := w.rc.Control(func(uintptr) {}); cerr == nil {
		w.failed = err
	}
	p.mu.Unlock()
	go w.wake()
}

// Failed is the poller's refusal of the socket (the epoll set full, or out of memory); nil
// while it may be parked. An owner it refused waits on its goroutine, as without a poller.
func (w *Waiter) Failed() error {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.failed
}

// Wake ends the waiter's Park now (see Park); the socket may have nothing to read.
func (w *Waiter) Wake() {
	p := w.p
	p.mu.Lock()
	if w.token == 0 {
		w.kicked = true
		p.mu.Unlock()
		return
	}
	delete(p.parked, w.token)
	w.token = 0
	p.mu.Unlock()
	go w.wake()
}

// ready wakes the waiters whose tokens the platform reported; a token no longer parked
// (woken meanwhile) is skipped.
func (p *Poller) ready(tokens []uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, t := range tokens {
		if w := p.parked[t]; w != nil {
			delete(p.parked, t)
			w.token = 0
			go w.wake()
		}
	}
}

// Parked is how many waiters are parked.
func (p *Poller) Parked() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.parked)
}

// Close stops the poller once nothing is parked on it any more (its owner ends what it
// parked first); a waiter still parked is woken, and later Parks wake at once.
func (p *Poller) Close() {
	p.shut()
	p.stop()
}

// shut wakes every parked waiter and makes later Parks wake at once.
func (p *Poller) shut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for t, w := range p.parked {
		delete(p.parked, t)
		w.token = 0
		go w.wake()
	}
}
