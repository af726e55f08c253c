//go:build !race

package mux

// poolsKeep: see race_on_test.go.
const poolsKeep = true
