//go:build soak

package soak

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/certs"
	"github.com/pulsar-proxy/pulsar-proxy/test/metrics"
	"github.com/pulsar-proxy/pulsar-proxy/test/proxyproc"
	"github.com/pulsar-proxy/pulsar-proxy/test/rig"
	"github.com/pulsar-proxy/pulsar-proxy/test/wait"
)

// The load, kept light (a shared two-core machine that also runs the rig): three flows at
// flowRate msg/s each, and clients churned by three loops, each client opening one or two
// connections through the proxy (a lookup connection, and a direct session for a producer).
const (
	flowRate        = 100
	plainChurnEvery = 150 * time.Millisecond // client, lookup, producer, one message, close
	tlsChurnEvery   = 300 * time.Millisecond // the same over TLS: a handshake each
	lookupEvery     = 100 * time.Millisecond // client, partitioned metadata, close
	sampleEvery     = 5 * time.Second
)

// TestSoak runs the proxy under mixed load for SOAK_DURATION, samples its resources, writes
// soak.csv, summary.md and soak.png to SOAK_RESULTS (default test/soak/results) and fails
// if an acknowledged message was lost or a client met an error. The slopes are reported, not
// asserted (a shared, noisy machine).
func TestSoak(t *testing.T) {
	d := os.Getenv(envDuration)
	duration, err := time.ParseDuration(d)
	if err != nil || duration < time.Minute {
		t.Fatalf("SOAK_DURATION=%q: want a duration of a minute or more", d)
	}
	out := resultsDir()
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	ep, proc := startProxy(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lookupTopic := rig.UniqueTopic(t, "soak-lookup")
	if err := theRig.CreatePartitionedTopic(ctx, lookupTopic, 4); err != nil {
		t.Fatal(err)
	}
	flows := []*flow{{topic: rig.UniqueTopic(t, "soak-flow")}, {topic: rig.UniqueTopic(t, "soak-flow"), useTLS: true},
		{topic: rig.UniqueTopic(t, "soak-flow")}}
	churnTopics := []string{rig.UniqueTopic(t, "soak-churn"), rig.UniqueTopic(t, "soak-churn")}

	csv, err := os.Create(filepath.Join(out, "soak.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer csv.Close()
	began := time.Now()
	smp := &sampler{url: proc.HTTPURL + "/metrics", began: began, flows: flows, csv: csv, stop: make(chan struct{})}
	if _, err := csv.WriteString(CSVHeader); err != nil {
		t.Fatal(err)
	}
	samplerDone := smp.every(sampleEvery)
	load, stopLoad := context.WithTimeout(context.Background(), duration)
	defer stopLoad()
	drained, stopDrain := context.WithCancel(context.Background())
	defer stopDrain()
	var tl tally
	var wg sync.WaitGroup
	flowErrs := make([]error, len(flows))
	for i, f := range flows {
		wg.Go(func() { flowErrs[i] = f.run(ep, flowRate, load, drained, &tl) })
	}
	var churners sync.WaitGroup
	n := 0
	churners.Go(func() {
		churn(load, plainChurnEvery, &tl, "churned producer", func() error { n++; return produceOnce(ep, false, churnTopics[n%2], &tl) })
	})
	churners.Go(func() {
		churn(load, tlsChurnEvery, &tl, "churned TLS producer", func() error { return produceOnce(ep, true, churnTopics[0], &tl) })
	})
	churners.Go(func() {
		churn(load, lookupEvery, &tl, "churned lookup", func() error { return lookupOnce(ep, lookupTopic, 4, &tl) })
	})
	<-load.Done()
	close(smp.stop) // the samples cover the load only; one more comes once every client closed
	<-samplerDone
	churners.Wait()
	t.Logf("load ended after %s; draining the flows", time.Since(began).Round(time.Second))
	waitDrained(flows, 2*time.Minute)
	stopDrain()
	wg.Wait()
	afterClose := settle(t, smp)
	samples, sampleErrs := smp.all()
	report(t, out, d, duration, samples, sampleErrs, afterClose, flows, &tl, proc)
	for i, err := range flowErrs {
		if err != nil {
			t.Errorf("flow %d (%s) did not start: %v", i, flows[i].topic, err)
		}
	}
}

// startProxy runs the proxy with token authentication (HS256, a key made here), a TLS
// listener beside the plaintext one, and info logging (no per-session lines).
func startProxy(t *testing.T) (endpoint, *proxyproc.Proc) {
	dir := t.TempDir()
	ca := certs.NewCA(t, dir, "ca")
	server := ca.Server(t, "proxy", time.Now().Add(24*time.Hour))
	secret := make([]byte, 32)
	rand.Read(secret)
	secretFile := filepath.Join(dir, "token.key")
	if err := os.WriteFile(secretFile, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	yaml := fmt.Sprintf(`tls:
  certFile: %q
  keyFile: %q
auth:
  enabled: true
  refreshTimeout: 10s
  token:
    secretKeyFile: %q
    leeway: 0s
log:
  level: info
  sessionSummary: off
`, server.CertFile, server.KeyFile, secretFile)
	p := proxyproc.StartForTest(t, proxyBinary, dir, []string{theRig.BrokerURL(1), theRig.BrokerURL(2)}, yaml)
	return endpoint{plainURL: p.PulsarURL, tlsURL: p.PulsarTLSURL, caFile: ca.CertFile, secret: secret}, p
}

// waitDrained waits until every flow's consumer has every acknowledged message, or limit.
func waitDrained(flows []*flow, limit time.Duration) {
	wait.Within(limit, func() bool {
		left := 0
		for _, f := range flows {
			_, m := f.missing()
			left += m
		}
		return left == 0
	})
}

// settle waits for the closed clients' sessions to end and samples the proxy once more.
func settle(t *testing.T, smp *sampler) Sample {
	wait.Within(30*time.Second, func() bool {
		s, err := smp.take()
		if err != nil {
			t.Fatalf("sampling after the load: %v", err)
		}
		return s.Sessions == 0
	})
	time.Sleep(5 * time.Second) // closed sessions' goroutines and descriptors go too
	s, err := smp.take()
	if err != nil {
		t.Fatalf("sampling after the load: %v", err)
	}
	return s
}

// resultsDir is SOAK_RESULTS, or test/soak/results in the checkout.
func resultsDir() string {
	if d := os.Getenv("SOAK_RESULTS"); d != "" {
		return d
	}
	return filepath.Join(proxyproc.RepoRoot(), "test", "soak", "results")
}

// commit names the checkout's HEAD, with -dirty when it has uncommitted changes.
func commit() string {
	out, err := exec.Command("git", "-C", proxyproc.RepoRoot(), "describe", "--always", "--dirty", "--abbrev=7").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

// scrapeCount reads a counter series from a fresh scrape.
func scrapeCount(t *testing.T, proc *proxyproc.Proc, name string, labels ...string) float64 {
	s, err := metrics.Fetch(proc.HTTPURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	v, err := s.Count(name, labels...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
