package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// event is one line of `go test -json` (test2json).
type event struct {
	Action  string
	Test    string
	Output  string
	Elapsed float64
}

// run is one run's outcome per top-level test, and why each failed or skipped.
type run struct {
	// outcome is pass, fail or skip. A test that never ended (timeout, panic) failed; a test
	// run more than once (-test.count) passed only if it passed every time.
	outcome map[string]string
	why     map[string]string
	seconds float64
}

func readRun(path string) (*run, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := &run{outcome: map[string]string{}, why: map[string]string{}}
	open := map[string]int{} // tests started and not yet ended
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue
		}
		top, _, sub := strings.Cut(e.Test, "/")
		switch {
		case e.Test == "" && (e.Action == "pass" || e.Action == "fail"):
			r.seconds += e.Elapsed // a run resumed after a panic is several
		case e.Test == "" || sub:
		case e.Action == "run":
			open[top]++
		case e.Action == "pass" || e.Action == "fail" || e.Action == "skip":
			open[top]--
			r.record(top, e.Action)
		case e.Action == "output" && r.why[top] == "":
			r.why[top] = reason(e.Output)
		}
	}
	for top, n := range open {
		if n > 0 {
			r.record(top, "fail")
		}
	}
	return r, sc.Err()
}

// record adds one ending of test top: a failure outweighs a pass, a pass a skip.
func (r *run) record(top, action string) {
	switch o := r.outcome[top]; {
	case o == "fail", o == "pass" && action == "skip":
	default:
		r.outcome[top] = action
	}
}

// reason picks a line that says why a test failed or skipped.
func reason(line string) string {
	l := strings.TrimSpace(line)
	for _, marker := range []string{"Error:", "panic:", "_test.go:"} {
		if i := strings.Index(l, marker); i >= 0 && !strings.HasPrefix(l, "---") && !strings.HasPrefix(l, "===") {
			l = strings.TrimSpace(l[i:])
			if len(l) > 160 {
				l = l[:160] + "…"
			}
			return strings.ReplaceAll(l, "|", "/")
		}
	}
	return ""
}

// report compares the runs, writes the page and fails on a test that passed directly and
// failed through the proxy, unless its reruns clear it (rerunVerdict).
func report(args []string) error {
	if len(args) < 3 {
		return fmt.Errorf("report DIRECT.json PROXY.json PAGE.md [direct-rerun-N.json proxy-rerun-N.json...]")
	}
	direct, err := readRun(args[0])
	if err != nil {
		return err
	}
	proxy, err := readRun(args[1])
	if err != nil {
		return err
	}
	var reruns reruns
	for _, p := range args[3:] {
		r, err := readRun(p)
		if err != nil {
			return err
		}
		if strings.HasPrefix(filepath.Base(p), "direct") {
			reruns.direct = append(reruns.direct, r)
		} else {
			reruns.proxy = append(reruns.proxy, r)
		}
	}
	c := compare(direct, proxy, reruns)
	if err := os.WriteFile(args[2], []byte(c.page(direct, proxy)), 0o644); err != nil {
		return err
	}
	fmt.Printf("peer suite: %d tests; directly %d passed, through the proxy %d passed; %d pass only directly; rerun in both modes: %d, of which %d flaky in both, %d failed through the proxy once only\n",
		len(c.names), count(direct, "pass"), count(proxy, "pass"), len(c.proxyOnly), len(c.rerun), len(c.flakyBoth), len(c.flaky))
	if len(c.proxyOnly) > 0 {
		return fmt.Errorf("tests that pass directly and fail through the proxy: %s", strings.Join(c.proxyOnly, ", "))
	}
	return nil
}

// reruns are the runs, in each mode, of the tests that passed directly and failed through
// the proxy the first time.
type reruns struct{ direct, proxy []*run }

// tally is how many of runs ran test n and how many of those passed it.
func tally(n string, runs []*run) (passed, ran int) {
	for _, r := range runs {
		switch r.outcome[n] {
		case "pass":
			passed++
			ran++
		case "fail":
			ran++
		}
	}
	return passed, ran
}

// Verdicts on a test that passed directly and failed through the proxy, from its reruns.
const (
	verdictProxy = "fails through the proxy" // the gate fails
	verdictBoth  = "flaky in both modes"
	verdictOnce  = "failed through the proxy once, passed on every rerun"
)

// rerunVerdict decides, from the reruns in both modes, whether a test that passed directly
// and failed through the proxy fails because of the proxy. It does if it passed directly
// every time and failed through the proxy again, or never passed through the proxy while it
// passed directly more often than not. A test that also failed directly is flaky in both
// modes: its first difference says nothing about the proxy. Without reruns the first
// difference stands.
func rerunVerdict(dPassed, dRan, pPassed, pRan int) string {
	switch {
	case pRan == 0 || dRan == 0:
		return verdictProxy
	case dPassed == dRan && pPassed < pRan:
		return verdictProxy
	case pPassed == 0 && 2*dPassed > dRan:
		return verdictProxy
	case dPassed < dRan:
		return verdictBoth
	}
	return verdictOnce
}

// rerunRow is a rerun test's line on the page.
type rerunRow struct {
	name, verdict                string
	dPassed, dRan, pPassed, pRan int
}

type comparison struct {
	names, proxyOnly, flaky, flakyBoth, bothFail, skipped, directOnly []string
	rerun                                                             []rerunRow
}

func compare(direct, proxy *run, again reruns) comparison {
	var c comparison
	for n := range direct.outcome {
		c.names = append(c.names, n)
	}
	for n := range proxy.outcome {
		if _, ok := direct.outcome[n]; !ok {
			c.names = append(c.names, n)
		}
	}
	slices.Sort(c.names)
	for _, n := range c.names {
		d, p := direct.outcome[n], proxy.outcome[n]
		switch {
		case d == "pass" && p != "pass":
			c.addRerun(n, again)
		case d == "skip" || p == "skip":
			c.skipped = append(c.skipped, n)
		case d != "pass" && p != "pass":
			c.bothFail = append(c.bothFail, n)
		case d != "pass":
			c.directOnly = append(c.directOnly, n)
		}
	}
	return c
}

// addRerun files a test that passed directly and failed through the proxy by its verdict.
func (c *comparison) addRerun(n string, again reruns) {
	row := rerunRow{name: n}
	row.dPassed, row.dRan = tally(n, again.direct)
	row.pPassed, row.pRan = tally(n, again.proxy)
	row.verdict = rerunVerdict(row.dPassed, row.dRan, row.pPassed, row.pRan)
	switch row.verdict {
	case verdictProxy:
		c.proxyOnly = append(c.proxyOnly, n)
	case verdictBoth:
		c.flakyBoth = append(c.flakyBoth, n)
	default:
		c.flaky = append(c.flaky, n)
	}
	if row.dRan+row.pRan > 0 {
		c.rerun = append(c.rerun, row)
	}
}

func count(r *run, outcome string) int {
	n := 0
	for _, o := range r.outcome {
		if o == outcome {
			n++
		}
	}
	return n
}

func (c comparison) page(direct, proxy *run) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("# The peer suite: pulsar-client-go's own tests, directly and through the proxy\n\n")
	w("<!-- Generated by `make peer-suite` (test/peer/peer.sh); do not edit by hand. -->\n\n")
	w("Run %s at commit `%s`: pulsar-client-go %s (`./pulsar`, its own certificates, tokens and\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), os.Getenv("PEER_COMMIT"), os.Getenv("PEER_CLIENT_VERSION"))
	w("credentials file) against two Pulsar %s brokers configured as its CI configures its broker, once\n", os.Getenv("PEER_PULSAR_VERSION"))
	w("directly and once through pulsar-proxy. In the run through the proxy the test process has a\n")
	w("network namespace of its own whose only way out is a relay to the proxy's four ports: no broker\n")
	w("can be reached from it (test/peer/README.md).\n\n")
	w("| | passed | failed | skipped | time |\n|---|---|---|---|---|\n")
	w("| directly | %d | %d | %d | %.0f s |\n", count(direct, "pass"), count(direct, "fail"), count(direct, "skip"), direct.seconds)
	w("| through the proxy | %d | %d | %d | %.0f s |\n\n", count(proxy, "pass"), count(proxy, "fail"), count(proxy, "skip"), proxy.seconds)
	w("**Pass directly, fail through the proxy: %d.**\n\n", len(c.proxyOnly))
	c.list(&b, "Pass directly, fail through the proxy", c.proxyOnly, proxy)
	c.rerunTable(&b, proxy)
	c.list(&b, "Fail directly and through the proxy", c.bothFail, direct)
	c.list(&b, "Fail directly, pass through the proxy", c.directOnly, direct)
	c.list(&b, "Skipped", c.skipped, direct)
	if skip := os.Getenv("PEER_SKIP"); skip != "" {
		w("## Left out of both runs\n\n`%s`: these tests start a broker in Docker\n", skip)
		w("(testcontainers), which panics the test binary where Docker is not running.\n")
	}
	return b.String()
}

// rerunTable lists the tests rerun in both modes, their passes and the verdict.
func (c comparison) rerunTable(b *strings.Builder, proxy *run) {
	if len(c.rerun) == 0 {
		return
	}
	fmt.Fprintf(b, "## Rerun in both modes (%d)\n\n", len(c.rerun))
	b.WriteString("A test that passed directly and failed through the proxy is run again, on emptied namespaces,\n")
	b.WriteString("a few times directly and as often through the proxy: a client's test can be timing-sensitive,\n")
	b.WriteString("and one failure through the proxy does not say the proxy failed it. It counts against the proxy\n")
	b.WriteString("(above) if it passed directly on every rerun and failed through the proxy again, or never passed\n")
	b.WriteString("through the proxy while it passed directly more often than not. A test that also fails directly\n")
	b.WriteString("is flaky in both modes.\n\n")
	b.WriteString("| test | reruns passed directly | reruns passed through the proxy | verdict | why it failed through the proxy first |\n|---|---|---|---|---|\n")
	for _, r := range c.rerun {
		fmt.Fprintf(b, "| `%s` | %d of %d | %d of %d | %s | %s |\n", r.name, r.dPassed, r.dRan, r.pPassed, r.pRan, r.verdict, proxy.why[r.name])
	}
	b.WriteString("\n")
}

func (c comparison) list(b *strings.Builder, title string, names []string, r *run) {
	if len(names) == 0 {
		return
	}
	fmt.Fprintf(b, "## %s (%d)\n\n| test | why (first reason the run printed) |\n|---|---|\n", title, len(names))
	for _, n := range names {
		fmt.Fprintf(b, "| `%s` | %s |\n", n, r.why[n])
	}
	b.WriteString("\n")
}

// failed prints a -run pattern of the tests that passed directly and failed through the
// proxy, for a rerun.
func failed(args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("failed DIRECT.json PROXY.json")
	}
	direct, err := readRun(args[0])
	if err != nil {
		return err
	}
	proxy, err := readRun(args[1])
	if err != nil {
		return err
	}
	if c := compare(direct, proxy, reruns{}); len(c.proxyOnly) > 0 {
		fmt.Printf("^(%s)$", strings.Join(c.proxyOnly, "|"))
	}
	return nil
}

// remaining prints a -run pattern of the tests in LIST (one name a line) that RUN.json never
// started ("" when none): the binary ended early (a test panicked) and these are still to run.
func remaining(args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("remaining LIST RUN.json")
	}
	list, err := os.ReadFile(args[0])
	if err != nil {
		return err
	}
	r, err := readRun(args[1])
	if err != nil {
		return err
	}
	var left []string
	for _, n := range strings.Fields(string(list)) {
		if _, started := r.outcome[n]; !started {
			left = append(left, n)
		}
	}
	if len(left) > 0 {
		fmt.Printf("^(%s)$", strings.Join(left, "|"))
	}
	return nil
}
