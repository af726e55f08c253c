//go:build !race

package frame

// poolsKeep: see race_on_test.go.
const poolsKeep = true
