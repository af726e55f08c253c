//go:build race

package mux

// poolsKeep: a race build's sync.Pool drops what is put at random, so allocation counts of
// pooled paths mean nothing there (make test-unit runs those tests without -race too).
const poolsKeep = false
