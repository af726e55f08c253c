package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestImagePortsMatchChart: the image exposes exactly the container ports the chart's pods
// declare with every listener on (Pulsar plaintext and TLS, HTTP, HTTPS), so that what
// `docker run -P` publishes and what the chart's Service targets agree.
func TestImagePortsMatchChart(t *testing.T) {
	helm := helmBinary(t)
	chart := filepath.Join("..", "..", "helm", "pulsar-proxy")
	out, err := exec.Command(helm, "template", "p", chart, "--set", "tls.enabled=true", "--set", "tls.secretName=proxy-tls").CombinedOutput()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	var chartPorts []string
	for _, m := range regexp.MustCompile(`(?m)^\s*containerPort:\s*(\d+)\s*$`).FindAllStringSubmatch(string(out), -1) {
		if p := m[1] + "/tcp"; !slices.Contains(chartPorts, p) {
			chartPorts = append(chartPorts, p)
		}
	}
	slices.Sort(chartPorts)
	image := slices.Sorted(slices.Values(exposedPorts))
	if len(chartPorts) == 0 || !slices.Equal(chartPorts, image) {
		t.Errorf("the chart's container ports (TLS on) are %q, the image exposes %q", chartPorts, image)
	}
}

// helmBinary is the pinned helm test/rig/build-helm.sh builds into the cache (`make helm`:
// RIG_CACHE, default .cache, as helm-<HELM_VERSION of test/rig/versions.env>), or
// RIG_HELM_BIN. Without it the test skips, saying why, or fails on CI.
func helmBinary(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("RIG_HELM_BIN")
	if bin == "" {
		pins, err := os.ReadFile(filepath.Join("..", "..", "test", "rig", "versions.env"))
		if err != nil {
			t.Fatal(err)
		}
		var version string
		for _, line := range strings.Split(string(pins), "\n") {
			if v, ok := strings.CutPrefix(line, "HELM_VERSION="); ok {
				version = strings.TrimSpace(v)
			}
		}
		cache := os.Getenv("RIG_CACHE")
		if cache == "" {
			cache = filepath.Join("..", "..", ".cache")
		}
		bin = filepath.Join(cache, "helm-"+version)
	}
	if _, err := os.Stat(bin); err != nil {
		if ci := os.Getenv("CI"); ci != "" && ci != "false" && ci != "0" {
			t.Fatalf("helm could not be prepared: %v (on CI nothing may be skipped)", err)
		}
		t.Skipf("helm (`make helm` builds it: test/rig/build-helm.sh): %v", err)
	}
	return bin
}
