//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The committed results must be well formed: every path and size present, the Markdown table
// and goals rendered, the chart a PNG. The numbers themselves are the benchmark's business.
func TestCommittedResultsAreWellFormed(t *testing.T) {
	checkResultsDir(t, "results")
}

// A run's writer produces files the check above accepts.
func TestWriteResultsRoundTrip(t *testing.T) {
	dir := t.TempDir()
	if err := writeResults(sampleResults(), dir); err != nil {
		t.Fatal(err)
	}
	checkResultsDir(t, dir)
}

// decodeStrict reads dir/name.json into v, failing the test on a field v does not have.
func decodeStrict(t *testing.T, dir, name string, v any) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s.json: %v", name, err)
	}
}

func checkResultsDir(t *testing.T, dir string) {
	t.Helper()
	var r results
	decodeStrict(t, dir, "latest", &r)
	if r.Date == "" || r.Machine.CPUs < 1 || r.Config.Rounds < 1 || len(r.Config.MessageSizes) == 0 {
		t.Fatalf("latest.json: date, machine or config missing: %+v %+v", r.Machine, r.Config)
	}
	want := []string{pathDirect, pathPulsarProxy, pathPulsarProxyFramed, pathJavaProxy, pathHAProxy}
	if strings.Join(r.Paths, ",") != strings.Join(want, ",") {
		t.Fatalf("paths = %v, want %v", r.Paths, want)
	}
	for _, name := range want {
		checkPathSummary(t, &r, name)
	}
	if len(r.Goals) != len(r.Config.MessageSizes)+5 {
		t.Errorf("%d goals, want %d", len(r.Goals), len(r.Config.MessageSizes)+5)
	}

	md, err := os.ReadFile(filepath.Join(dir, "latest.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range want {
		if !strings.Contains(string(md), "\n| "+name+" |") {
			t.Errorf("latest.md: no table row for %s", name)
		}
	}
	if !strings.Contains(string(md), "| goal | target | measured | met |") {
		t.Error("latest.md: no goals table")
	}
	checkChart(t, dir, "latest")
}

// checkPathSummary: path name has a summary with a throughput per size, a run per round and
// size, and the proxy-only figures exactly when it is a proxy.
func checkPathSummary(t *testing.T, r *results, name string) {
	t.Helper()
	s := r.summary(name)
	if s == nil {
		t.Fatalf("no summary for %s", name)
	}
	for _, size := range r.Config.MessageSizes {
		if s.throughput(size).Size != size {
			t.Errorf("%s: no throughput for %d B", name, size)
		}
		runs := 0
		for _, tr := range r.Throughput {
			if tr.Path == name && tr.Size == size {
				runs++
			}
		}
		if runs != r.Config.Rounds {
			t.Errorf("%s %d B: %d runs, want %d rounds", name, size, runs, r.Config.Rounds)
		}
	}
	proxy := name != pathDirect
	if (s.CPUSecondsPerGB != nil) != proxy || (s.PeakRSSMiB != nil) != proxy ||
		(s.IdleKiBPerConnLookup != nil) != proxy || (s.IdleKiBPerConnDirect != nil) != proxy {
		t.Errorf("%s: proxy-only figures must be set exactly for proxies: %+v", name, s)
	}
}

// checkChart: dir's name.png is a PNG large enough for a chart.
func checkChart(t *testing.T, dir, name string) {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, name+".png"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s.png: %v", name, err)
	}
	if b := img.Bounds(); b.Dx() < 400 || b.Dy() < 200 {
		t.Errorf("%s.png is %v, too small for a chart", name, b)
	}
}

func sampleResults() *results {
	r := &results{Date: "2026-01-02T03:04:05Z", Machine: machine{CPUs: 2, CPUModel: "test", Kernel: "6", GoVersion: "go"},
		Config: quickConfig, Paths: []string{pathDirect, pathPulsarProxy, pathPulsarProxyFramed, pathJavaProxy, pathHAProxy}, LatencyRate: 1000}
	for i, name := range r.Paths {
		s := pathSummary{Path: name, Latency: latency{Samples: 10, P50: 1, P99: 2, P999: 3}}
		for _, size := range r.Config.MessageSizes {
			r.Throughput = append(r.Throughput, throughputRun{Path: name, Size: size, Messages: 100, Bytes: int64(100 * size), Seconds: 1, MsgsPerSec: 100, MBPerSec: 1})
			s.Throughput = append(s.Throughput, sizeThroughput{Size: size, MsgsPerSec: 100 - float64(i), MBPerSec: 1})
		}
		if name != pathDirect {
			s.CPUSecondsPerGB, s.PeakRSSMiB, s.IdleKiBPerConnLookup, s.IdleKiBPerConnDirect = ptr(float64(i)), ptr(10), ptr(8), ptr(9)
		}
		r.Summary = append(r.Summary, s)
	}
	r.Goals = goals(r)
	return r
}

// The pages show the committed results as the report renders them: docs/performance.md both
// benchmarks' summaries, README.md the headline figures; and latest.md is the rendering of
// latest.json.
func TestDocsShowTheCommittedResults(t *testing.T) {
	blocks, err := docBlocks("results")
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range blocks {
		page, err := os.ReadFile(filepath.Join("..", filepath.FromSlash(b.page)))
		if err != nil {
			t.Fatal(err)
		}
		got, ok := between(string(page), b.begin, b.end)
		if !ok {
			t.Errorf("%s: no %q ... %q markers", b.page, b.begin, b.end)
		} else if got != b.text {
			line, g, w := firstDiff(got, b.text)
			t.Errorf("%s, line %d after %q, differs from the committed results; go run ./bench -rerender (or -proxy-bound -rerender) writes it:\n got: %q\nwant: %q",
				b.page, line, b.begin, g, w)
		}
	}
	md, err := os.ReadFile(filepath.Join("results", "latest.md"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := loadResults("results")
	if err != nil {
		t.Fatal(err)
	}
	if markdown(r) != string(md) {
		t.Error("results/latest.md differs from what the report renders of latest.json; go run ./bench -rerender")
	}
}

// firstDiff is the first line (counted from 1) where got and want differ, and both lines.
func firstDiff(got, want string) (int, string, string) {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return i + 1, gl, wl
		}
	}
	return 0, "", ""
}

// replaceBetween and between agree: what one writes the other reads back.
func TestReplaceBetween(t *testing.T) {
	file := filepath.Join(t.TempDir(), "page.md")
	if err := os.WriteFile(file, []byte("intro\n<!-- b -->\nold\n<!-- e -->\nafter\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := replaceBetween(file, "<!-- b -->", "<!-- e -->", "new\ntable\n"); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(file)
	if got, ok := between(string(raw), "<!-- b -->", "<!-- e -->"); !ok || got != "new\ntable\n" {
		t.Errorf("between = %q, %v; file:\n%s", got, ok, raw)
	}
	if err := replaceBetween(file, "<!-- x -->", "<!-- e -->", "y"); err == nil {
		t.Error("no error for missing markers")
	}
}
