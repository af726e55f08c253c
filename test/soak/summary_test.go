//go:build soak

package soak

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/test/proxyproc"
)

// report writes summary.md and soak.png, prints the summary, and fails the test for what must
// hold whatever the machine: no acknowledged message lost, no client or sampling error, token
// refreshes that happened and never failed.
func report(t *testing.T, out, durationArg string, duration time.Duration, samples []Sample, sampleErrs []error, afterClose Sample,
	flows []*flow, tl *tally, proc *proxyproc.Proc) {
	if len(samples) < 2 {
		t.Fatalf("only %d samples (errors: %v)", len(samples), sampleErrs)
	}
	warmUp := duration / 2
	first, last := samples[0], samples[len(samples)-1]
	var acked, lost int
	for _, f := range flows {
		a, m := f.missing()
		acked, lost = acked+a, lost+m
	}
	nErrs, firstErrs := tl.errors()
	refreshFailed := scrapeCount(t, proc, "pulsar_proxy_credential_refreshes_total", `result="failed"`)
	expired := scrapeCount(t, proc, "pulsar_proxy_session_closes_total", `reason="credentials_expired"`)
	command := "make soak"
	if duration != 30*time.Minute {
		command = "make soak SOAK_DURATION=" + durationArg
	}
	run := Run{
		Date: time.Now().UTC().Format("2006-01-02 15:04 UTC"), Commit: commit(), Command: command,
		Duration: duration, WarmUp: warmUp, Trends: Trends(samples, warmUp), Final: last, AfterClose: afterClose,
		Facts: []string{
			fmt.Sprintf("messages: %d acknowledged (%.0f/s) on %d flows (paced at %d msg/s each, one over TLS), %d of them not received",
				acked, float64(acked)/duration.Seconds(), len(flows), flowRate, lost),
			fmt.Sprintf("clients churned (opened, used, closed): %d plaintext, %d TLS; %d producers created and closed, %d partitioned-metadata lookups",
				tl.clients.Load(), tl.tlsClients.Load(), tl.producers.Load(), tl.lookups.Load()),
			fmt.Sprintf("client connections through the proxy (pulsar_proxy_sessions_total): %.0f (%.1f/s)",
				afterClose.SessionsTotal-first.SessionsTotal, (afterClose.SessionsTotal-first.SessionsTotal)/duration.Seconds()),
			fmt.Sprintf("token refreshes (%s tokens, AUTH_CHALLENGE answered): %.0f ok, %.0f failed; sessions closed for expired credentials: %.0f",
				tokenTTL, afterClose.Refreshes, refreshFailed, expired),
			fmt.Sprintf("client errors: %d; sampling errors: %d; %d samples every %s", nErrs, len(sampleErrs), len(samples), sampleEvery),
			fmt.Sprintf("under load at the end: %s; after every client closed: %s", last, afterClose),
		},
	}
	md := Markdown(run)
	if err := os.WriteFile(filepath.Join(out, "summary.md"), []byte(md), 0o644); err != nil {
		t.Fatal(err)
	}
	if out == filepath.Join(proxyproc.RepoRoot(), "test", "soak", "results") {
		if err := UpdatePage(filepath.Join(proxyproc.RepoRoot(), "docs", "reliability.md"), md); err != nil {
			t.Error(err)
		}
	}
	var png bytes.Buffer
	if err := Plot(&png, fmt.Sprintf("pulsar-proxy soak, %s, %s, commit %s", duration, run.Date, run.Commit), samples, run.Trends, warmUp); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "soak.png"), png.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("RESULT soak summary (%s):\n%s", out, md)
	for _, e := range firstErrs {
		t.Logf("client error: %s", e)
	}
	check(t, acked, lost, nErrs, sampleErrs, afterClose.Refreshes, refreshFailed, expired)
}

func check(t *testing.T, acked, lost, nErrs int, sampleErrs []error, refreshed, refreshFailed, expired float64) {
	if acked == 0 || lost != 0 {
		t.Errorf("%d messages acknowledged, %d of them not received", acked, lost)
	}
	if nErrs != 0 {
		t.Errorf("%d client errors (first ones logged above)", nErrs)
	}
	if len(sampleErrs) != 0 {
		t.Errorf("%d scrapes failed, the first: %v", len(sampleErrs), sampleErrs[0])
	}
	if refreshed == 0 || refreshFailed != 0 || expired != 0 {
		t.Errorf("token refreshes: %.0f ok, %.0f failed, %.0f sessions closed for expired credentials", refreshed, refreshFailed, expired)
	}
}
