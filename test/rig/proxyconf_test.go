package rig

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/internal/app/convert"
)

// TestConvertKnowsEverySettingOfApachesProxy holds convert-config's table of Apache's proxy
// settings (internal/app/convert) to the ProxyConfiguration class of the pinned Pulsar jar:
// every field is a setting the converter maps or reports, with the same default, and the test
// file with every key (internal/app/convert/testdata/proxy-4.x-all-keys.conf) sets each of
// them.
func TestConvertKnowsEverySettingOfApachesProxy(t *testing.T) {
	fields := proxyConfigFields(t)
	if len(fields) < 100 {
		t.Fatalf("the probe listed %d fields of ProxyConfiguration; want over 100", len(fields))
	}
	known := convert.ApacheDefaults()
	allKeys := readKeys(t, filepath.Join(repoDir(t), "internal", "app", "convert", "testdata", "proxy-4.x-all-keys.conf"))
	for name, def := range fields {
		k, ok := known[name]
		switch {
		case !ok:
			t.Errorf("ProxyConfiguration.%s (default %q) is not in convert-config's table", name, def)
		case !k.Varies && k.Default != def:
			t.Errorf("ProxyConfiguration.%s defaults to %q in Pulsar %s; convert-config's table says %q", name, def, pulsarVersion(t), k.Default)
		}
		if !allKeys[name] {
			t.Errorf("proxy-4.x-all-keys.conf does not set %s", name)
		}
	}
}

// proxyConfigFields runs ProxyConfigProbe.java against the Pulsar jars: field → default.
func proxyConfigFields(t *testing.T) map[string]string {
	t.Helper()
	for _, tool := range []string{"java", "javac"} {
		if _, err := exec.LookPath(tool); err != nil {
			Need(t, "Pulsar's ProxyConfiguration", &PrereqError{Reason: tool + " is not on PATH (the probe of Pulsar's ProxyConfiguration is Java)"})
		}
	}
	cp, err := pulsarClasspath()
	Need(t, "the Pulsar jars", err)
	dir, err := ScriptsDir()
	if err != nil {
		t.Fatal(err)
	}
	classes := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "javac", "-encoding", "UTF-8", "-cp", cp, "-d", classes, filepath.Join(dir, "ProxyConfigProbe.java")).CombinedOutput(); err != nil {
		t.Fatalf("javac ProxyConfigProbe.java: %v\n%s", err, out)
	}
	out, err := exec.CommandContext(ctx, "java", "-cp", classes+string(os.PathListSeparator)+cp, "ProxyConfigProbe").Output()
	if err != nil {
		t.Fatalf("java ProxyConfigProbe: %v", err)
	}
	fields := map[string]string{}
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		name, def, _ := strings.Cut(line, "\t")
		fields[name] = def
	}
	return fields
}

// readKeys returns the keys a properties file sets (key=value lines; comments skipped).
func readKeys(t *testing.T, path string) map[string]bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	keys := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, _, _ := strings.Cut(line, "=")
		keys[strings.TrimSpace(k)] = true
	}
	return keys
}
