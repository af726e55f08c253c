// Package prereq holds the rule the product's tests follow for a prerequisite the machine
// lacks: on CI (CI set, and not "false" or "0") the test fails; elsewhere it says why it
// skips. The test module has the same rule for the rig (test/rig: OnCI, Need).
package prereq

import (
	"os"
	"testing"
)

// OnCI reports whether the tests run on CI, where nothing may be skipped.
func OnCI() bool {
	ci := os.Getenv("CI")
	return ci != "" && ci != "false" && ci != "0"
}

// Need fails t on CI and skips it elsewhere when err says a prerequisite (what) is missing;
// a nil err does nothing.
func Need(t testing.TB, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if OnCI() {
		t.Fatalf("%s: %v (on CI nothing may be skipped)", what, err)
	}
	t.Skipf("%s: %v", what, err)
}
