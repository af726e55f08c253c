package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRerunVerdict: a test that passed directly and failed through the proxy counts against
// the proxy unless its reruns show it flaky in both modes, or failing through the proxy once.
func TestRerunVerdict(t *testing.T) {
	for _, c := range []struct {
		dPassed, dRan, pPassed, pRan int
		want                         string
	}{
		{0, 0, 0, 0, verdictProxy}, // no reruns: the first difference stands
		{3, 3, 0, 3, verdictProxy}, // passes directly, fails through the proxy every time
		{3, 3, 2, 3, verdictProxy}, // passes directly every time, fails through the proxy again
		{2, 3, 0, 3, verdictProxy}, // never through the proxy, mostly directly
		{1, 3, 0, 3, verdictBoth},  // fails directly mostly too
		{2, 3, 2, 3, verdictBoth},
		{2, 3, 3, 3, verdictBoth},
		{3, 3, 3, 3, verdictOnce},
	} {
		if got := rerunVerdict(c.dPassed, c.dRan, c.pPassed, c.pRan); got != c.want {
			t.Errorf("directly %d of %d, through the proxy %d of %d: %q, want %q", c.dPassed, c.dRan, c.pPassed, c.pRan, got, c.want)
		}
	}
}

// events is a go test -json stream: each line "ACTION TEST" (TEST may be "").
func events(t *testing.T, dir, name string, lines ...string) string {
	var b strings.Builder
	for _, l := range lines {
		action, test, _ := strings.Cut(l, " ")
		b.WriteString(`{"Action":"` + action + `","Test":"` + test + `"}` + "\n")
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestReadRunRepeated: run more than once, a test passed only if every run passed it; one
// that never ended failed.
func TestReadRunRepeated(t *testing.T) {
	p := events(t, t.TempDir(), "r.json",
		"run A", "pass A", "run A", "fail A", "run A", "pass A",
		"run B", "pass B", "run B", "pass B",
		"run C", "pass C", "run C",
		"run D", "skip D", "run D/sub", "fail D/sub")
	r, err := readRun(p)
	if err != nil {
		t.Fatal(err)
	}
	for test, want := range map[string]string{"A": "fail", "B": "pass", "C": "fail", "D": "skip"} {
		if r.outcome[test] != want {
			t.Errorf("%s: %q, want %q", test, r.outcome[test], want)
		}
	}
}

// TestReportGate: the gate fails on a test that passes directly on its reruns and fails
// through the proxy again, and not on one that fails directly on its reruns too; the page
// names both with their reruns.
func TestReportGate(t *testing.T) {
	dir := t.TempDir()
	direct := events(t, dir, "direct.json", "run Flaky", "pass Flaky", "run Broken", "pass Broken")
	proxy := events(t, dir, "proxy.json", "run Flaky", "fail Flaky", "run Broken", "fail Broken")
	var again []string
	for i, outcome := range []string{"pass", "fail"} {
		n := string(rune('1' + i))
		again = append(again,
			events(t, dir, "direct-rerun-"+n+".json", "run Flaky", outcome+" Flaky", "run Broken", "pass Broken"),
			events(t, dir, "proxy-rerun-"+n+".json", "run Flaky", "pass Flaky", "run Broken", "fail Broken"))
	}
	page := filepath.Join(dir, "page.md")
	err := report(append([]string{direct, proxy, page}, again...))
	if err == nil || !strings.Contains(err.Error(), "Broken") || strings.Contains(err.Error(), "Flaky") {
		t.Errorf("gate: %v, want Broken alone", err)
	}
	b, _ := os.ReadFile(page)
	for _, want := range []string{"| `Flaky` | 1 of 2 | 2 of 2 | flaky in both modes |", "| `Broken` | 2 of 2 | 0 of 2 | fails through the proxy |"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("page lacks %q:\n%s", want, b)
		}
	}
}

// TestRemaining: after a test that ended the binary (B: started, never ended), the tests
// never started are the ones to run again; none are when every test started.
func TestRemaining(t *testing.T) {
	dir := t.TempDir()
	list := filepath.Join(dir, "list")
	if err := os.WriteFile(list, []byte("A\nB\nC\nD\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cut := events(t, dir, "cut.json", "run A", "pass A", "run B", "fail ")
	whole := events(t, dir, "whole.json", "run A", "pass A", "run B", "run C", "pass C", "run D", "skip D")
	for _, c := range []struct{ run, want string }{{cut, "^(C|D)$"}, {whole, ""}} {
		out := captureStdout(t, func() error { return remaining([]string{list, c.run}) })
		if out != c.want {
			t.Errorf("%s: %q, want %q", filepath.Base(c.run), out, c.want)
		}
	}
}

// captureStdout is what f prints.
func captureStdout(t *testing.T, f func() error) string {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	ferr := f()
	os.Stdout = stdout
	w.Close()
	b, _ := io.ReadAll(r)
	if ferr != nil {
		t.Fatal(ferr)
	}
	return string(b)
}
