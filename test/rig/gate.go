package rig

import (
	"errors"
	"fmt"
	"os"
	"testing"
)

// OnCI reports whether CI is set; there a missing prerequisite fails instead of skipping.
func OnCI() bool {
	ci := os.Getenv("CI")
	return ci != "" && ci != "false" && ci != "0"
}

// Gate is the start of an end-to-end package's TestMain (after flag.Parse): it returns
// run=false with the exit code to use when the package cannot run — under -short, or without
// its prerequisites (a printed skip outside CI, a failure on CI).
func Gate(pkg string) (run bool, exitCode int) {
	if testing.Short() {
		fmt.Printf("SKIP: %s: end-to-end tests do not run with -short (they start Pulsar brokers)\n", pkg)
		return false, 0
	}
	if err := CheckPrerequisites(); err != nil {
		return false, StartFailure(pkg, err)
	}
	return true, 0
}

// StartFailure reports a rig that could not start and returns the exit code: a missing
// prerequisite outside CI is a printed skip (0), anything else a failure (1).
func StartFailure(pkg string, err error) int {
	var pe *PrereqError
	if errors.As(err, &pe) && !OnCI() {
		fmt.Printf("SKIP: %s: end-to-end tests skipped: %v\n", pkg, err)
		return 0
	}
	fmt.Fprintf(os.Stderr, "FAIL: %s: the rig did not start: %v\n", pkg, err)
	return 1
}

// Need ends t when a prerequisite could not be prepared (err != nil): a missing one
// (*PrereqError) outside CI is a skip that names it; on CI, or any other error, a failure.
func Need(t testing.TB, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	var pe *PrereqError
	if errors.As(err, &pe) && !OnCI() {
		t.Skipf("%s cannot be prepared here: %v", what, err)
	}
	t.Fatalf("%s could not be prepared: %v", what, err)
}
