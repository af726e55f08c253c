package firstday

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"

	"github.com/pulsar-proxy/pulsar-proxy/test/proxyproc"
	"github.com/pulsar-proxy/pulsar-proxy/test/wait"
)

// releaseVersion is the version the test's release is stamped with.
const releaseVersion = "v0.0.0-firstday"

// TestFirstDay follows docs/install.md: the binary from `make release` for this machine,
// checked with the page's checksum command; the page's configuration with the rig's brokers
// in place of the example ones; the page's check-config command, clean; the proxy started
// with that configuration, ready, carrying a topic whose partitions live on both brokers;
// then stopped with SIGTERM, as a service manager stops it.
func TestFirstDay(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(proxyproc.RepoRoot(), "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	bin := releaseBinary(t, string(doc), work)
	cfg := filepath.Join(work, "config.yaml")
	if err := os.WriteFile(cfg, []byte(rigConfig(t, docBlock(t, string(doc), "config"))), 0o644); err != nil {
		t.Fatal(err)
	}
	env := allowedPorts()
	checkConfig(t, docBlock(t, string(doc), "check"), work, filepath.Dir(bin), env)

	// The page's listeners are fixed loopback ports; the test's proxy binds free ones (port 0),
	// whose addresses proxyproc reads from the startup line, so no other test can collide.
	p, err := proxyproc.StartConfig(bin, work, cfg, append(env, "PULSAR_PROXY_LISTEN_PULSAR=127.0.0.1:0", "PULSAR_PROXY_LISTEN_HTTP=127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			t.Logf("proxy log digest (%s):\n%s", p.LogPath, p.LogDigest(15, 12))
		}
	}()
	if !wait.Within(60*time.Second, func() bool { code, _ := p.Get("/readyz"); return code == 200 }) {
		code, body := p.Get("/readyz")
		t.Fatalf("/readyz: %d %s", code, body)
	}
	produceConsume(t, p.PulsarURL)
	if !p.Stop() {
		t.Errorf("pulsar-proxy did not stop on SIGTERM")
	}
}

// releaseBinary builds the release for this machine's platform with `make release`, checks it
// with the page's verify block run in the release's folder, and installs the binary as
// dir/bin/pulsar-proxy, as the page's install step does.
func releaseBinary(t *testing.T, doc, dir string) string {
	t.Helper()
	rel := filepath.Join(dir, "release")
	platform := runtime.GOOS + "/" + runtime.GOARCH
	mk := exec.Command("make", "--no-print-directory", "-C", proxyproc.RepoRoot(), "release",
		"RELEASE_OUT="+rel, "RELEASE_PLATFORMS="+platform, "RELEASE_IMAGE=false", "VERSION="+releaseVersion)
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make release: %v\n%s", err, out)
	}
	name := "pulsar-proxy-" + releaseVersion + "-" + runtime.GOOS + "-" + runtime.GOARCH
	out := runShell(t, docBlock(t, doc, "verify"), rel, nil)
	if !strings.Contains(out, name+": OK") {
		t.Fatalf("the page's checksum command did not report %s OK:\n%s", name, out)
	}
	bin := filepath.Join(dir, "bin", "pulsar-proxy")
	b, err := os.ReadFile(filepath.Join(rel, name))
	if err == nil {
		if err = os.MkdirAll(filepath.Dir(bin), 0o755); err == nil {
			err = os.WriteFile(bin, b, 0o755)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if v, err := exec.Command(bin, "--version").Output(); err != nil || strings.TrimSpace(string(v)) != "pulsar-proxy "+releaseVersion {
		t.Fatalf("--version: %q, %v", v, err)
	}
	return bin
}

// rigConfig is the page's configuration with its example brokers replaced by the rig's.
func rigConfig(t *testing.T, cfg string) string {
	t.Helper()
	for n := 1; n <= 2; n++ {
		for example, real := range map[string]string{
			fmt.Sprintf("pulsar://broker-%d.example.com:6650", n): theRig.BrokerURL(n),
			fmt.Sprintf("http://broker-%d.example.com:8080", n):   theRig.BrokerHTTP(n),
		} {
			if strings.Count(cfg, example) != 1 {
				t.Fatalf("the page's configuration names %s %d times, want once:\n%s", example, strings.Count(cfg, example), cfg)
			}
			cfg = strings.Replace(cfg, example, real, 1)
		}
	}
	return cfg
}

// allowedPorts lets the proxy connect to the rig's brokers, whose ports are not Pulsar's
// defaults (the page says so for brokers like them).
func allowedPorts() []string {
	var ports, web []string
	for _, b := range theRig.Brokers {
		ports = append(ports, b.URL[strings.LastIndexByte(b.URL, ':')+1:])
		web = append(web, b.HTTP[strings.LastIndexByte(b.HTTP, ':')+1:])
	}
	return []string{"PULSAR_PROXY_BROKER_ALLOWED_PORTS=" + strings.Join(ports, ","), "PULSAR_PROXY_BROKER_ALLOWED_WEB_PORTS=" + strings.Join(web, ",")}
}

// findingLine is a check-config finding that is not "ok": a warning or an error; reportLine
// is any finding or the summary (what the test logs; the effective configuration is left out).
var (
	findingLine = regexp.MustCompile(`(?m)^(warning|error)\s.*$`)
	reportLine  = regexp.MustCompile(`(?m)^(ok|warning|error|check-config:)\s.*$`)
)

// checkConfig runs the page's check-config block beside config.yaml, the installed binary
// first on PATH: it must exit 0 with no warning and no error.
func checkConfig(t *testing.T, block, dir, binDir string, env []string) {
	t.Helper()
	env = append(env, "PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	out := runShell(t, block, dir, env)
	if bad := findingLine.FindAllString(out, -1); len(bad) > 0 {
		t.Fatalf("check-config is not clean: %q\n%s", bad, out)
	}
	t.Logf("check-config:\n%s", strings.Join(reportLine.FindAllString(out, -1), "\n"))
}

// runShell runs a block of the page with sh in dir (env added to this environment) and
// returns its combined output; a non-zero exit fails the test.
func runShell(t *testing.T, block, dir string, env []string) string {
	t.Helper()
	c := exec.Command("sh", "-euc", block)
	c.Dir, c.Env = dir, append(os.Environ(), env...)
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.TrimSpace(block), err, out)
	}
	return string(out)
}

// docBlock is the fenced block that follows the page's `<!-- first-day: name ...` marker.
func docBlock(t *testing.T, doc, name string) string {
	t.Helper()
	m := regexp.MustCompile("(?s)<!-- first-day: " + regexp.QuoteMeta(name) + "\\b[^\\n]*-->\\n```[a-z]*\\n(.*?)```").FindStringSubmatch(doc)
	if m == nil {
		t.Fatalf("docs/install.md has no fenced block after <!-- first-day: %s -->", name)
	}
	return m[1]
}

// produceConsume sends messages to a topic whose partitions live on both brokers, through the
// proxy at url, and receives every one of them.
func produceConsume(t *testing.T, url string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	topic, _, err := theRig.CreateSpreadPartitionedTopic(ctx, "firstday", 4)
	if err != nil {
		t.Fatal(err)
	}
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: url, OperationTimeout: 30 * time.Second, Logger: plog.DefaultNopLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "first-day", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	defer cons.Close()
	prod, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatalf("producer: %v", err)
	}
	defer prod.Close()
	const n = 200
	sent := map[string]bool{}
	for i := range n {
		payload := fmt.Sprintf("first day %03d", i)
		sent[payload] = true
		if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(payload), Key: fmt.Sprint(i)}); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	for range n {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("receive (%d of %d still missing): %v", len(sent), n, err)
		}
		delete(sent, string(m.Payload()))
		cons.Ack(m)
	}
	if len(sent) > 0 {
		t.Fatalf("%d messages never arrived", len(sent))
	}
}
