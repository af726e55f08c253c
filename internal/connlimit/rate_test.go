package connlimit

import (
	"net/netip"
	"testing"
	"time"
)

func TestRatePerIP(t *testing.T) {
	now := time.Unix(1000, 0)
	c := NewRate(2, 3, 64) // 2 per second, 3 at once
	c.now = func() time.Time { return now }
	a, a2, b := tcpAddr("203.0.113.7:1000"), tcpAddr("[::ffff:203.0.113.7]:2000"), tcpAddr("203.0.113.8:1000")
	for i := range 3 {
		if !c.Allow(a) {
			t.Fatalf("connection %d of the burst refused", i+1)
		}
	}
	if c.Allow(a2) {
		t.Fatal("a fourth connection at once allowed (the mapped spelling of the same IP)")
	}
	if !c.Allow(b) {
		t.Fatal("another IP refused")
	}
	now = now.Add(500 * time.Millisecond) // one token back
	if !c.Allow(a) || c.Allow(a) {
		t.Fatal("after half a second exactly one more connection should pass")
	}
	now = now.Add(time.Hour) // every bucket refilled: swept
	c.Allow(b)
	if n := len(c.limiters); n != 1 {
		t.Fatalf("%d buckets kept after a sweep, want only the one just used", n)
	}
	if NewRate(0, 20, 64) != nil || !(*Rate)(nil).Allow(a) {
		t.Fatal("a zero rate must mean no limit")
	}
}

// When the table is full, new IPs pass untracked: a flood of addresses cannot lock everyone out.
func TestRateTableBound(t *testing.T) {
	c := NewRate(1, 1, 64)
	now := time.Unix(1000, 0)
	c.now = func() time.Time { return now }
	for i := range maxTrackedIPs {
		c.limiters[netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})] = nil
	}
	c.nextSweep = now.Add(time.Hour)
	fresh := tcpAddr("198.51.100.1:1")
	if !c.Allow(fresh) || !c.Allow(fresh) {
		t.Fatal("an untracked IP was refused while the table is full")
	}
}
