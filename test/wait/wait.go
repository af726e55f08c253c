// Package wait is the test module's one way to wait for a condition (the end-to-end tests, the
// rig, the proxy process and the soak): poll it until it holds, and fail the test, saying what
// did not happen, when it has not within the limit. It has the API of the product's
// internal/testkit/wait; it polls more gently, since what these tests poll is often a call to a
// real broker, ZooKeeper, Consul or a proxy's /metrics, and their limits run to minutes.
package wait

import (
	"testing"
	"time"
)

// The interval between polls starts at first and doubles up to most: a condition that holds
// soon is seen soon, one that takes a minute is asked ten times a second, not hundreds, and a
// wait a test measures and reports is measured to a tenth of a second. A condition that is slow
// to ask (an admin CLI that starts a JVM) is paused after for as long as it took, so it runs
// at most half the time and leaves the machine to what it waits for.
const (
	first = 10 * time.Millisecond
	most  = 100 * time.Millisecond
)

// Until polls cond until it returns true; after limit it fails t with what (what the test
// waited for, e.g. "the broker to see the producer") and stops the test.
func Until(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Within(limit, cond) {
		t.Fatalf("waited %v for %s; it did not happen", limit, what)
	}
}

// Within polls cond until it returns true or limit passes, and reports whether it held; for
// tests that must go on (or clean up, or say more) either way, and for helpers that return an
// error rather than fail a test.
func Within(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for interval := first; ; interval = min(2*interval, most) {
		asked := time.Now()
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		pause := max(interval, time.Since(asked))
		time.Sleep(min(pause, max(time.Until(deadline), time.Millisecond)))
	}
}
