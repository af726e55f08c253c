// Package wait is the product's tests' one way to wait for a condition: poll it until it
// holds, and fail the test, saying what did not happen, when it has not within the limit.
package wait

import (
	"testing"
	"time"
)

// interval is how often a condition is polled: often enough that a test waits little past the
// moment it holds, seldom enough not to compete with what it waits for.
const interval = 2 * time.Millisecond

// Until polls cond until it returns true; after limit it fails t with what (what the test
// waited for, e.g. "the broker to see the producer") and stops the test.
func Until(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Within(limit, cond) {
		t.Fatalf("waited %v for %s; it did not happen", limit, what)
	}
}

// Within polls cond until it returns true or limit passes, and reports whether it held; for
// tests that must go on (or clean up) either way.
func Within(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(interval)
	}
	return true
}
