package observability_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const rules = "../../helm/pulsar-proxy/files/pulsar-proxy-alerts.yaml"

// promtool is the pinned promtool that test/rig/build-promtool.sh builds into the cache
// (RIG_CACHE, default .cache, as promtool-<PROMTOOL_VERSION of test/rig/versions.env>), or
// RIG_PROMTOOL_BIN. Without it the test skips, saying why, or fails on CI.
func promtool(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("RIG_PROMTOOL_BIN")
	if bin == "" {
		pins, err := os.ReadFile(filepath.Join("..", "..", "test", "rig", "versions.env"))
		if err != nil {
			t.Fatal(err)
		}
		var version string
		for _, line := range strings.Split(string(pins), "\n") {
			if v, ok := strings.CutPrefix(line, "PROMTOOL_VERSION="); ok {
				version = strings.TrimSpace(v)
			}
		}
		if version == "" {
			t.Fatal("test/rig/versions.env has no PROMTOOL_VERSION")
		}
		cache := os.Getenv("RIG_CACHE")
		if cache == "" {
			cache = filepath.Join("..", "..", ".cache")
		}
		bin = filepath.Join(cache, "promtool-"+version)
	}
	if _, err := os.Stat(bin); err != nil {
		if ci := os.Getenv("CI"); ci != "" && ci != "false" && ci != "0" {
			t.Fatalf("promtool could not be prepared: no promtool at %s", bin)
		}
		t.Skipf("promtool cannot be prepared here: no promtool at %s (`make promtool` builds it: test/rig/build-promtool.sh)", bin)
	}
	return bin
}

// TestAlertRules: the rule file is valid (promtool check rules) and every alert behaves as
// its unit tests say (promtool test rules alerts_test.yaml).
func TestAlertRules(t *testing.T) {
	bin := promtool(t)
	for _, args := range [][]string{{"check", "rules", rules}, {"test", "rules", "alerts_test.yaml"}} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
		if err != nil {
			t.Errorf("promtool %s: %v", strings.Join(args, " "), err)
		}
	}
}
