//go:build linux

package idlewait

import (
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// pair is a connected TCP pair: the proxy's side (whose raw conn is parked) and the peer's.
func pair(t *testing.T) (*net.TCPConn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); peer.Close() })
	return c.(*net.TCPConn), peer
}

func newPoller(t *testing.T) *Poller {
	t.Helper()
	p, err := New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func waiter(t *testing.T, p *Poller, c *net.TCPConn) (*Waiter, chan struct{}) {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	woken := make(chan struct{}, 10)
	return p.NewWaiter(rc, func() { woken <- struct{}{} }), woken
}

func expectWake(t *testing.T, woken chan struct{}, what string) {
	t.Helper()
	select {
	case <-woken:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not woken", what)
	}
}

func expectNoWake(t *testing.T, woken chan struct{}, what string) {
	t.Helper()
	select {
	case <-woken:
		t.Fatalf("%s: woken", what)
	case <-time.After(100 * time.Millisecond):
	}
}

func TestParkWakesOnInputOnce(t *testing.T) {
	p := newPoller(t)
	c, peer := pair(t)
	w, woken := waiter(t, p, c)
	w.Park()
	expectNoWake(t, woken, "nothing sent")
	if p.Parked() != 1 {
		t.Fatalf("parked = %d, want 1", p.Parked())
	}
	peer.Write([]byte("x"))
	expectWake(t, woken, "input")
	expectNoWake(t, woken, "one wake per park")
	// Parked again with the byte still unread: level-triggered, it wakes at once.
	w.Park()
	expectWake(t, woken, "unread input")
	var b [1]byte
	c.Read(b[:])
	w.Park()
	expectNoWake(t, woken, "input taken")
	peer.Close()
	expectWake(t, woken, "end of stream")
	if p.Parked() != 0 {
		t.Fatalf("parked = %d, want 0", p.Parked())
	}
}

func TestWake(t *testing.T) {
	p := newPoller(t)
	c, peer := pair(t)
	w, woken := waiter(t, p, c)
	w.Park()
	w.Wake()
	expectWake(t, woken, "Wake while parked")
	w.Wake() // not parked: the next Park wakes at once
	expectNoWake(t, woken, "Wake while not parked")
	w.Park()
	expectWake(t, woken, "Park after a Wake")
	w.Park()
	expectNoWake(t, woken, "the Wake was used up")
	w.Wake()
	expectWake(t, woken, "Wake")
	peer.Write([]byte("x")) // the old registration's event finds no waiter
	expectNoWake(t, woken, "input after a Wake")
}

func TestParkClosedSocketWakes(t *testing.T) {
	p := newPoller(t)
	c, _ := pair(t)
	w, woken := waiter(t, p, c)
	c.Close()
	w.Park()
	expectWake(t, woken, "closed socket")
	if p.Parked() != 0 {
		t.Fatalf("parked = %d, want 0", p.Parked())
	}
}

func TestCloseWakesParked(t *testing.T) {
	p, err := New()
	if err != nil {
		t.Fatal(err)
	}
	c, _ := pair(t)
	w, woken := waiter(t, p, c)
	w.Park()
	p.Close()
	expectWake(t, woken, "Close")
	w.Park()
	expectWake(t, woken, "Park after Close")
}

// Many sockets on one poller: each is woken by its own input only.
func TestManyWaiters(t *testing.T) {
	p := newPoller(t)
	const n = 200
	peers := make([]net.Conn, n)
	wakes := make([]chan struct{}, n)
	for i := range n {
		c, peer := pair(t)
		w, woken := waiter(t, p, c)
		peers[i], wakes[i] = peer, woken
		w.Park()
	}
	for i := 0; i < n; i += 2 {
		peers[i].Write([]byte("x"))
	}
	for i := 0; i < n; i += 2 {
		expectWake(t, wakes[i], "input")
	}
	for i := 1; i < n; i += 2 {
		select {
		case <-wakes[i]:
			t.Fatalf("waiter %d woken without input", i)
		default:
		}
	}
	if got := p.Parked(); got != n/2 {
		t.Fatalf("parked = %d, want %d", got, n/2)
	}
}

func TestTokensSurviveTheHighBits(t *testing.T) {
	p := newPoller(t)
	p.next = 1<<32 - 1 // the next token crosses into the high half
	c, peer := pair(t)
	w, woken := waiter(t, p, c)
	w.Park()
	peer.Write([]byte("x"))
	expectWake(t, woken, "input with a token above 32 bits")
}
