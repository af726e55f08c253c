//go:build linux

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/pulsar-proxy/pulsar-proxy/bench/speaker"
)

var proxyPaths = []string{pathDirect, pathPulsarProxy, pathPulsarProxyFramed, pathPulsarProxyMultiplex, pathJavaProxy, pathHAProxy, pathHAProxySplice}

// The committed results are well formed too (every path, the multiplexed one beside the framed
// one included), and proxy-bound.md is what the report renders of proxy-bound.json.
func TestCommittedProxyResultsAreWellFormed(t *testing.T) {
	checkProxyResultsDir(t, "results")
	md, err := os.ReadFile(filepath.Join("results", proxyResultsName+".md"))
	if err != nil {
		t.Fatal(err)
	}
	_, details, _ := strings.Cut(string(md), proxyDetailsHead)
	if !strings.Contains(details, "- "+pathPulsarProxyMultiplex+": pulsar_proxy_multiplex_dials_total ") {
		t.Errorf("%s.md: no check of the shared broker connections the multiplexed path opened", proxyResultsName)
	}
	r, err := loadProxyResults("results")
	if err != nil {
		t.Fatal(err)
	}
	if summary, details := proxyMarkdown(r); summary+details != string(md) {
		t.Errorf("results/%s.md differs from what the report renders of %s.json; go run ./bench -proxy-bound -rerender", proxyResultsName, proxyResultsName)
	}
}

// A run's writer produces files that checkProxyResultsDir (also run on the committed results)
// accepts.
func TestProxyWriteResultsRoundTrip(t *testing.T) {
	dir := t.TempDir()
	if err := writeProxyResults(sampleProxyResults(), dir); err != nil {
		t.Fatal(err)
	}
	checkProxyResultsDir(t, dir)
}

func checkProxyResultsDir(t *testing.T, dir string) {
	t.Helper()
	var r proxyResults
	decodeStrict(t, dir, proxyResultsName, &r)
	if r.Date == "" || r.Machine.CPUs < 1 || r.Config.Rounds < 1 || len(r.Config.Workloads) == 0 || len(r.Config.Conns) == 0 ||
		r.LoadAvgBefore == "" || r.LoadAvgAfter == "" || r.Pinning == "" {
		t.Fatalf("date, machine, config, load or pinning missing: %+v", r.Config)
	}
	if strings.Join(r.Paths, ",") != strings.Join(proxyPaths, ",") {
		t.Fatalf("paths = %v, want %v", r.Paths, proxyPaths)
	}
	checkProxyCells(t, &r)
	for _, f := range r.Config.LatencyFractions {
		for _, path := range r.Paths {
			if r.latency(path, f) == nil {
				t.Errorf("no latency of %s at %.2f", path, f)
			}
		}
	}
	checkProxyGoalCounts(t, &r)
	checkProxyMarkdown(t, dir, &r)
	checkChart(t, dir, proxyResultsName)
}

// checkProxyCells: every role, count, workload and path has a cell; one without a round says
// why, and CPU s/GB is set exactly for proxies.
func checkProxyCells(t *testing.T, r *proxyResults) {
	t.Helper()
	for _, role := range r.Config.Roles {
		for _, n := range r.Config.Conns {
			for _, w := range r.Config.Workloads {
				for _, path := range r.Paths {
					c := r.cell(path, role, n, w)
					if c == nil {
						t.Fatalf("no cell for %s %s x%d %s", path, role, n, w.label())
					}
					if c.Rounds == 0 && c.Error == "" {
						t.Errorf("%s %s x%d %s: no round and no error", path, role, n, w.label())
					}
					if c.Rounds > 0 && (c.CPUSecondsPerGB != nil) != (path != pathDirect) {
						t.Errorf("%s %s x%d %s: CPU s/GB must be set exactly for proxies", path, role, n, w.label())
					}
				}
			}
		}
	}
}

// checkProxyGoalCounts: the goals are there, framed-vs-passthrough per role and workload,
// added latency for both pulsar-proxy paths, idle memory; the measured framed goals have a
// spread where the run had goal rounds.
func checkProxyGoalCounts(t *testing.T, r *proxyResults) {
	t.Helper()
	framedGoals, latencyGoals, idleGoals, muxGoals := 0, 0, 0, 0
	for _, g := range r.Goals {
		switch {
		case strings.HasPrefix(g.Goal, "multiplexed "):
			muxGoals++
			if g.Spread == "" {
				t.Errorf("goal %q: no ratio per workload", g.Goal)
			}
		case strings.HasPrefix(g.Goal, "framed CPU s/GB"):
			framedGoals++
		case strings.HasPrefix(g.Goal, "added p99"):
			latencyGoals++
		case strings.HasPrefix(g.Goal, "RSS growth"):
			idleGoals++
		}
	}
	if framedGoals != 2*len(r.Config.Roles) || latencyGoals != 2 || idleGoals == 0 || muxGoals == 0 {
		t.Errorf("goals: %d framed, %d latency, %d idle memory, %d multiplexed", framedGoals, latencyGoals, idleGoals, muxGoals)
	}
	for _, g := range r.Goals {
		if strings.HasPrefix(g.Goal, "framed CPU s/GB") && !strings.HasSuffix(g.Goal, "(not measured)") && g.Spread == "" && r.Config.GoalRounds > 0 {
			t.Errorf("goal %q: no spread over the rounds", g.Goal)
		}
	}
}

// checkProxyMarkdown: dir's Markdown has a summary and details, a row for every path in each,
// the multiplexed path beside the framed one, the goals, load, pinning, latency and (where
// measured) the echo floor.
func checkProxyMarkdown(t *testing.T, dir string, r *proxyResults) {
	t.Helper()
	md, err := os.ReadFile(filepath.Join(dir, proxyResultsName+".md"))
	if err != nil {
		t.Fatal(err)
	}
	summary, details, ok := strings.Cut(string(md), proxyDetailsHead)
	if !ok {
		t.Fatalf("%s.md has no details", proxyResultsName)
	}
	for _, path := range r.Paths {
		if !strings.Contains(summary, "\n| "+path+" |") || !strings.Contains(details, "| "+path+" |") {
			t.Errorf("%s.md: no row for %s", proxyResultsName, path)
		}
	}
	// The multiplexed path beside the framed one: a row for every role, count and workload.
	for _, role := range r.Config.Roles {
		for _, n := range r.Config.Conns {
			for _, w := range r.Config.Workloads {
				if row := fmt.Sprintf("\n| %s | %d | %s (", role, n, w.label()); !strings.Contains(summary, row) {
					t.Errorf("%s.md: no multiplexed-vs-per-client row %q", proxyResultsName, row)
				}
			}
		}
	}
	for _, want := range []string{"| goal | target | measured | met |", "load average", "Pinning", "p50 / p99 / p99.9"} {
		if !strings.Contains(summary, want) {
			t.Errorf("%s.md: summary without %q", proxyResultsName, want)
		}
	}
	if r.echo(true) != nil && r.echo(false) != nil && !strings.Contains(summary, "| on the proxy's CPU (") {
		t.Errorf("%s.md: the echo floor was measured but is not in the summary", proxyResultsName)
	}
}

func sampleProxyResults() *proxyResults {
	cfg := proxyQuickConfig
	cfg.MaxConns, cfg.DescriptorLimit = 100, 1024
	r := &proxyResults{Date: "2026-01-02T03:04:05Z", Machine: machine{CPUs: 2, CPUModel: "test", Kernel: "6", GoVersion: "go"},
		Config: cfg, LoadAvgBefore: "1 1 1", LoadAvgAfter: "2 2 2", Pinning: "test", Paths: proxyPaths}
	for i, path := range proxyPaths {
		for _, role := range cfg.Roles {
			for _, n := range cfg.Conns {
				for _, w := range cfg.Workloads {
					run := proxyRun{Path: path, Role: role, Conns: n, Workload: w, Messages: 1000, Seconds: 1, MsgsPerSec: 1000,
						MBPerSec: float64(w.Size) / 1000, GenCPUSeconds: 0.9, ProxyCPUBusy: 90, LoadCPUBusy: 95}
					if path != pathDirect {
						run.ProxyCPUSeconds = ptr(0.5 + 0.1*float64(i))
					}
					if path == pathJavaProxy && n == 100 && role == roleConsumer {
						run = proxyRun{Path: path, Role: role, Conns: n, Workload: w, Error: "setup: connection 7 of 100: EOF"}
					}
					r.Runs = append(r.Runs, run)
				}
			}
		}
		for _, f := range cfg.LatencyFractions {
			r.Latency = append(r.Latency, proxyLatency{Path: path, Fraction: f, Rate: 1000, Samples: 10, RateAchieved: 1000,
				P50: 10 + float64(i), P99: 20 + float64(i), P999: 30 + float64(i), GenCPUPercent: 50})
		}
	}
	r.EchoFloor = []echoFloor{{ServerCPU: 0, CrossCPU: true, Bytes: 1024, Samples: 10, P50: 90, P99: 300, P999: 900},
		{ServerCPU: 1, Bytes: 1024, Samples: 10, P50: 40, P99: 100, P999: 200}}
	r.Setups = []fleetSetup{{Path: pathJavaProxy, Role: roleConsumer, Conns: 100, Opened: 6, Error: "connection 7 of 100: EOF"}}
	r.Idle = parseIdlemem(sampleIdlemem)
	summarizeProxy(r)
	r.Goals = proxyGoals(r)
	return r
}

const sampleIdlemem = `| mode | connections | RSS growth KiB/conn | live heap KiB/conn | stacks KiB/conn | goroutines/conn |
|---|--:|--:|--:|--:|--:|
| lookup | 1000 | 9.2 | 3.7 | 2.0 | 1.00 |
| direct | 1000 | 17.5 | 4.0 | 4.0 | 2.00 |
| direct | 10000 | (skipped: needs 20200 descriptors, the limit is 20000) | | | |
| direct multiplexed | 1000 | 5.5 | 2.9 | 0.7 | 0.00 |
| websocket consumer | 1000 | 45.2 | 21.8 | 16.1 | 3.00 |
`

// TestIdleMemoryGoals: each mode with a goal is held to its own (a multiplexed session to
// the direct one's), a skipped row and the WebSocket sessions' are not held to any.
func TestIdleMemoryGoals(t *testing.T) {
	var got []string
	for _, g := range idleMemoryGoals(parseIdlemem(sampleIdlemem)) {
		got = append(got, fmt.Sprintf("%s %s %.1f", g.Goal, g.Target, g.Value))
	}
	want := []string{
		"RSS growth per idle lookup connection, fresh process, 1000 connections <= 4 KiB 9.2",
		"RSS growth per idle direct session, fresh process, 1000 connections <= 8 KiB 17.5",
		"RSS growth per idle multiplexed direct session, fresh process, 1000 connections <= 8 KiB 5.5",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("goals:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestParseIdlemem(t *testing.T) {
	rows := parseIdlemem("building...\n" + sampleIdlemem)
	if len(rows) != 5 {
		t.Fatalf("%d rows: %+v", len(rows), rows)
	}
	if r := rows[1]; r.Mode != "direct" || r.Conns != 1000 || deref(r.RSSKiB) != 17.5 || deref(r.HeapKiB) != 4.0 || deref(r.Goroutines) != 2 {
		t.Errorf("row 2: %+v", r)
	}
	if r := rows[2]; r.RSSKiB != nil || !strings.HasPrefix(r.Skipped, "skipped: needs 20200") {
		t.Errorf("row 3: %+v", r)
	}
}

// Windows keep a fleet within its budget: a connection's window shrinks with the fleet, and
// where even one frame each is too much a semaphore takes over.
func TestWindows(t *testing.T) {
	for _, tc := range []struct {
		role        string
		w           workload
		frame, n    int
		window      int
		usesTokens  bool
		tokensAtMax int64
	}{
		{roleProducer, plain1KiB, 1100, 1, maxWindow, false, 0},
		{roleConsumer, batched1KiB, 103 << 10, 1, maxWindow / 100, false, 0},
		{roleProducer, plain1KiB, 1100, 9000, inflightBudget / (9000 * 1100), false, 0},
		{roleProducer, plain1MiB, 1<<20 + 100, 1, connBudget / (1<<20 + 100), false, 0},
		{roleProducer, plain1MiB, 1<<20 + 100, 100, 1, true, inflightBudget / (1<<20 + 100)},
	} {
		window, tokens := windows(tc.role, tc.w, tc.frame, tc.n)
		if window != tc.window || (tokens > 0) != tc.usesTokens || (tc.usesTokens && tokens != tc.tokensAtMax) {
			t.Errorf("%s %s x%d: window %d tokens %d, want %d %v %d", tc.role, tc.w.label(), tc.n, window, tokens, tc.window, tc.usesTokens, tc.tokensAtMax)
		}
		if !tc.usesTokens && tc.n*window*tc.frame > inflightBudget {
			t.Errorf("%s %s x%d: %d bytes in flight", tc.role, tc.w.label(), tc.n, tc.n*window*tc.frame)
		}
	}
}

// The framed path's token is one the proxy's HS256 check accepts, for role bench.
func TestHS256Token(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	tok, err := jwt.Parse(hs256Token(key, "bench"), func(*jwt.Token) (any, error) { return key, nil }, jwt.WithValidMethods([]string{"HS256"}))
	if err != nil {
		t.Fatal(err)
	}
	if sub, _ := tok.Claims.GetSubject(); sub != "bench" {
		t.Fatalf("sub = %q", sub)
	}
}

// The load generator against the speaker, no proxy between: producers get their receipts,
// consumers their messages, a paced run keeps round-trip times, and every fleet ends quiet.
func TestLoadAgainstSpeaker(t *testing.T) {
	sp, err := speaker.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	ep := endpoint{addr: sp.Addr()}
	short := loadRun{warmup: 50 * time.Millisecond, measure: 150 * time.Millisecond}
	for _, role := range []string{roleProducer, roleConsumer} {
		f, err := dialFleet(ep, role, 3)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range []workload{batched1KiB, plain100B, plain64KiB} {
			l := short
			l.w = w
			fr, err := f.drive(l)
			if err != nil {
				t.Fatalf("%s %s: %v", role, w.label(), err)
			}
			if fr.Messages <= 0 || fr.Messages%int64(w.Batch) != 0 {
				t.Fatalf("%s %s: %d messages", role, w.label(), fr.Messages)
			}
			for _, g := range f.conns {
				if g.inflight.Load() != 0 {
					t.Fatalf("%s %s: %d SENDs unanswered after the run", role, w.label(), g.inflight.Load())
				}
			}
		}
		f.close()
	}
	f, err := dialFleet(ep, roleProducer, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer f.close()
	l := short
	l.w, l.rate, l.tick, l.latency = plain1KiB, 5000, 200*time.Microsecond, true
	fr, err := f.drive(l)
	if err != nil {
		t.Fatal(err)
	}
	if len(fr.Latencies) == 0 || fr.Messages > 5000 {
		t.Fatalf("paced at 5000 msg/s for 150 ms: %d messages, %d round trips", fr.Messages, len(fr.Latencies))
	}
	for _, d := range fr.Latencies {
		if d <= 0 || d > 10*time.Second {
			t.Fatalf("round trip %v", d)
		}
	}
}

func TestMain(m *testing.M) {
	if os.Getenv(echoServerEnv) == "1" { // measureEchoFloor's server, this test binary again
		if err := serveEcho(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The echo floor runs its server as a child process and measures round trips through it.
func TestEchoFloorMeasuresRoundTrips(t *testing.T) {
	ef, err := measureEchoFloor(-1, false, 1024, 500*time.Microsecond, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if ef.Samples < 10 || ef.P50 <= 0 || ef.P50 > ef.P99 || ef.P99 > ef.P999 || ef.Bytes != 1024 {
		t.Fatalf("echo floor %+v", ef)
	}
}

// The goal's spread pairs the two paths round by round and leaves out a round either lacks.
func TestRoundRatiosPairRounds(t *testing.T) {
	run := func(path string, round int, cpu float64) proxyRun {
		return proxyRun{Path: path, Role: roleProducer, Conns: 100, Workload: plain64KiB, Round: round,
			Messages: 15625, ProxyCPUSeconds: ptr(cpu)} // 1.024 GB
	}
	runs := []proxyRun{
		run(pathPulsarProxy, 0, 1), run(pathPulsarProxyFramed, 0, 1.5),
		run(pathPulsarProxy, 1, 2), run(pathPulsarProxyFramed, 1, 2.2),
		run(pathPulsarProxyFramed, 2, 9), // no passthrough round 2
		run(pathPulsarProxy, 3, 1), {Path: pathPulsarProxyFramed, Role: roleProducer, Conns: 100, Workload: plain64KiB, Round: 3, Error: "stall"},
	}
	got := roundRatios(runs, roleProducer, 100, plain64KiB)
	if len(got) != 2 || fmt.Sprintf("%.2f %.2f", got[0], got[1]) != "1.10 1.50" {
		t.Fatalf("ratios %v, want [1.10 1.50]", got)
	}
}

// The goal's extra rounds count in the goal and nowhere else: a cell of the tables keeps the
// main rounds, so every path there has as many.
func TestGoalRoundsStayInTheGoal(t *testing.T) {
	r := sampleProxyResults()
	n, w := r.Config.HeadlineConns, batched1KiB
	before := *r.cell(pathPulsarProxyFramed, roleProducer, n, w).CPUSecondsPerGB
	for round := r.Config.Rounds; round < r.Config.GoalRounds; round++ {
		for _, path := range []string{pathPulsarProxy, pathPulsarProxyFramed} {
			r.Runs = append(r.Runs, proxyRun{Path: path, Role: roleProducer, Conns: n, Workload: w, Round: round,
				Messages: 1000, Seconds: 1, MsgsPerSec: 1000, ProxyCPUSeconds: ptr(5)})
		}
	}
	summarizeProxy(r)
	r.Goals = proxyGoals(r)
	c := r.cell(pathPulsarProxyFramed, roleProducer, n, w)
	if c.Rounds != r.Config.Rounds || *c.CPUSecondsPerGB != before {
		t.Errorf("the table's cell took the extra rounds: %d rounds, %.3f CPU s/GB (was %.3f)", c.Rounds, *c.CPUSecondsPerGB, before)
	}
	want := fmt.Sprintf("(%d and %d rounds pooled)", r.Config.GoalRounds, r.Config.GoalRounds)
	found := false
	for _, g := range r.Goals {
		if strings.HasPrefix(g.Goal, fmt.Sprintf("framed CPU s/GB vs passthrough, %s, %d producers", w.label(), n)) {
			found = strings.Contains(g.Goal, want) && strings.HasPrefix(g.Spread, fmt.Sprintf("%d rounds:", r.Config.GoalRounds))
			if !found {
				t.Errorf("goal %q, spread %q: want %s and %d rounds of spread", g.Goal, g.Spread, want, r.Config.GoalRounds)
			}
		}
	}
	if !found {
		t.Error("no goal for the cell")
	}
}
