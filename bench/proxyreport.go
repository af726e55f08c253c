//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image"
	"image/draw"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// proxyResults is what one proxy-bound run wrote: bench/results/proxy-bound.json.
type proxyResults struct {
	Date          string         `json:"date"`
	Machine       machine        `json:"machine"`
	Config        proxyConfig    `json:"config"`
	DurationSec   float64        `json:"durationSeconds"`
	LoadAvgBefore string         `json:"loadAvgBefore"`
	LoadAvgAfter  string         `json:"loadAvgAfter"`
	Pinning       string         `json:"pinning"`
	Paths         []string       `json:"paths"`
	Setups        []fleetSetup   `json:"setups"`
	Runs          []proxyRun     `json:"runs"`
	Cells         []proxyCell    `json:"cells"`
	Latency       []proxyLatency `json:"latency"`
	LatencyErrors []string       `json:"latencyErrors"`
	EchoFloor     []echoFloor    `json:"echoFloor,omitempty"`
	PeakRSSMiB    []pathValue    `json:"peakRssMiB"`
	Idle          []idleRow      `json:"idle"`
	IdleOutput    string         `json:"idleOutput"`
	Checks        []string       `json:"checks"`
	Goals         []goal         `json:"goals"`
}

// fleetSetup is the opening of one fleet's connections.
type fleetSetup struct {
	Path    string  `json:"path"`
	Role    string  `json:"role"`
	Conns   int     `json:"connections"`
	Round   int     `json:"round"`
	Opened  int     `json:"opened"`
	Seconds float64 `json:"seconds"`
	Error   string  `json:"error,omitempty"`
}

// proxyRun is one workload's measured interval through one path.
type proxyRun struct {
	Path            string   `json:"path"`
	Role            string   `json:"role"`
	Conns           int      `json:"connections"`
	Workload        workload `json:"workload"`
	Round           int      `json:"round"`
	Messages        int64    `json:"messages"`
	Seconds         float64  `json:"seconds"`
	MsgsPerSec      float64  `json:"msgsPerSec"`
	MBPerSec        float64  `json:"mbPerSec"`
	ProxyCPUSeconds *float64 `json:"proxyCpuSeconds"`
	GenCPUSeconds   float64  `json:"loadCpuSeconds"`
	// How busy each CPU was over the interval, with anything (this benchmark's processes and
	// whatever else ran on the shared machine), from /proc/stat.
	ProxyCPUBusy float64 `json:"proxyCpuBusyPercent"`
	LoadCPUBusy  float64 `json:"loadCpuBusyPercent"`
	// Stolen by the hypervisor, both CPUs together (0 to 200).
	StealPercent float64 `json:"stealPercent"`
	Error        string  `json:"error,omitempty"`
}

// proxyCell is a path's figures for one role, connection count and workload: medians over
// the rounds that succeeded; CPU s/GB over all of them together.
type proxyCell struct {
	Path            string   `json:"path"`
	Role            string   `json:"role"`
	Conns           int      `json:"connections"`
	Workload        workload `json:"workload"`
	Rounds          int      `json:"rounds"`
	MsgsPerSec      float64  `json:"msgsPerSec"`
	MBPerSec        float64  `json:"mbPerSec"`
	CPUSecondsPerGB *float64 `json:"cpuSecondsPerGB"`
	ProxyCPUPercent *float64 `json:"proxyCpuPercent"`
	GenCPUPercent   float64  `json:"loadCpuPercent"`
	// Medians of how busy the two CPUs were (with anything); their excess over the proxy's and
	// the load process's own CPU is what other processes took.
	ProxyCPUBusy float64 `json:"proxyCpuBusyPercent"`
	LoadCPUBusy  float64 `json:"loadCpuBusyPercent"`
	Error        string  `json:"error,omitempty"`
}

// proxyLatency is a path's SEND to SEND_RECEIPT round trip at one latency rate, in µs.
type proxyLatency struct {
	Path         string  `json:"path"`
	Fraction     float64 `json:"fraction"` // of the direct path's rate
	Rate         float64 `json:"rateMsgsPerSec"`
	Samples      int     `json:"samples"`
	RateAchieved float64 `json:"rateAchievedMsgsPerSec"`
	// The load process's CPU use (the generator and the speaker: its headroom shows whether
	// the figure is the path's or the load's), and how busy the proxy's CPU was.
	GenCPUPercent float64 `json:"loadCpuPercent"`
	ProxyCPUBusy  float64 `json:"proxyCpuBusyPercent"`
	P50           float64 `json:"p50Micros"`
	P99           float64 `json:"p99Micros"`
	P999          float64 `json:"p999Micros"`
	// GCCycles: the garbage collections of a Go proxy over the runs, warm-ups included (nil
	// for the others).
	GCCycles *float64 `json:"gcCycles,omitempty"`
}

// idleRow is one line of bench/idlemem's table.
type idleRow struct {
	Mode       string   `json:"mode"`
	Conns      int      `json:"connections"`
	RSSKiB     *float64 `json:"rssKiBPerConn"`
	HeapKiB    *float64 `json:"heapKiBPerConn"`
	StackKiB   *float64 `json:"stackKiBPerConn"`
	Goroutines *float64 `json:"goroutinesPerConn"`
	Skipped    string   `json:"skipped,omitempty"`
}

type pathValue struct {
	Path  string  `json:"path"`
	Value float64 `json:"value"`
}

func (r *proxyResults) cell(path, role string, conns int, w workload) *proxyCell {
	for i := range r.Cells {
		c := &r.Cells[i]
		if c.Path == path && c.Role == role && c.Conns == conns && c.Workload == w {
			return c
		}
	}
	return nil
}

// echo is the echo floor measured across the two CPUs (cross) or on one, or nil.
func (r *proxyResults) echo(cross bool) *echoFloor {
	for i := range r.EchoFloor {
		if r.EchoFloor[i].CrossCPU == cross {
			return &r.EchoFloor[i]
		}
	}
	return nil
}

func (r *proxyResults) latency(path string, fraction float64) *proxyLatency {
	for i := range r.Latency {
		if r.Latency[i].Path == path && r.Latency[i].Fraction == fraction {
			return &r.Latency[i]
		}
	}
	return nil
}

// goalFraction is the latency load of the goal: half the direct path's rate.
const goalFraction = 0.5

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	sort.Float64s(xs)
	if len(xs)%2 == 1 {
		return xs[len(xs)/2]
	}
	return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
}

// proxyMedian is the median of v over the successful runs of one cell.
func proxyMedian(runs []proxyRun, path, role string, conns int, w workload, v func(proxyRun) float64) float64 {
	var xs []float64
	for _, r := range runs {
		if r.Path == path && r.Role == role && r.Conns == conns && r.Workload == w && r.Error == "" {
			xs = append(xs, v(r))
		}
	}
	return median(xs)
}

// summarizeProxy fills r.Cells from r.Runs.
func summarizeProxy(r *proxyResults) {
	r.Cells = nil
	// The main rounds only: the goal's extra rounds (GoalRounds) run later, on fleets of their
	// own, for two paths; pooled in, they would set those paths apart from the others.
	var runs []proxyRun
	for _, run := range r.Runs {
		if run.Round < r.Config.Rounds {
			runs = append(runs, run)
		}
	}
	for _, role := range r.Config.Roles {
		for _, n := range r.Config.Conns {
			for _, w := range r.Config.Workloads {
				for _, path := range r.Paths {
					c := proxyCell{Path: path, Role: role, Conns: n, Workload: w}
					var pcts, gens, busyP, busyL []float64
					for _, run := range runs {
						if run.Path != path || run.Role != role || run.Conns != n || run.Workload != w {
							continue
						}
						if run.Error != "" {
							if c.Error == "" {
								c.Error = run.Error
							}
							continue
						}
						c.Rounds++
						gens = append(gens, 100*run.GenCPUSeconds/run.Seconds)
						busyP, busyL = append(busyP, run.ProxyCPUBusy), append(busyL, run.LoadCPUBusy)
						if run.ProxyCPUSeconds != nil {
							pcts = append(pcts, 100**run.ProxyCPUSeconds/run.Seconds)
						}
					}
					if c.Rounds > 0 {
						c.MsgsPerSec = proxyMedian(runs, path, role, n, w, func(x proxyRun) float64 { return x.MsgsPerSec })
						c.MBPerSec = proxyMedian(runs, path, role, n, w, func(x proxyRun) float64 { return x.MBPerSec })
						c.GenCPUPercent = median(gens)
						c.ProxyCPUBusy, c.LoadCPUBusy = median(busyP), median(busyL)
						if perGB, n := pooledCPUPerGB(runs, path, role, n, w); n > 0 {
							c.CPUSecondsPerGB = ptr(perGB)
							c.ProxyCPUPercent = ptr(median(pcts))
						}
					}
					r.Cells = append(r.Cells, c)
				}
			}
		}
	}
}

// Goals of issue 16, reported and never asserted.
const (
	goalFramedVsPassthrough = 1.2  // framed CPU s/GB over passthrough's
	goalIdleLookupKiB       = 4.0  // RSS growth per idle lookup connection, fresh process
	goalIdleDirectKiB       = 8.0  // RSS growth per idle direct session, fresh process
	goalAddedP99Micros      = 50.0 // added p99 over direct at half the direct path's rate
)

// goalWorkloads are the workloads of the framed-vs-passthrough goal.
var goalWorkloads = []workload{batched1KiB, plain64KiB}

// roundRatios are framed's CPU s/GB over passthrough's, round by round (each round runs
// the two paths one after the other), for the rounds both measured.
func roundRatios(runs []proxyRun, role string, n int, w workload) []float64 {
	perGB := func(path string) map[int]float64 {
		m := map[int]float64{}
		for _, x := range runs {
			if x.Path == path && x.Role == role && x.Conns == n && x.Workload == w && x.Error == "" && x.ProxyCPUSeconds != nil && x.Messages > 0 {
				m[x.Round] = *x.ProxyCPUSeconds / (float64(x.Messages) * float64(w.Size) / 1e9)
			}
		}
		return m
	}
	pt, fr := perGB(pathPulsarProxy), perGB(pathPulsarProxyFramed)
	var out []float64
	for round, f := range fr {
		if p, ok := pt[round]; ok && p > 0 {
			out = append(out, f/p)
		}
	}
	sort.Float64s(out)
	return out
}

// pooledCPUPerGB is a path's CPU s/GB over the given runs of a cell (the tables pass the
// main rounds, the goal every round) and how many rounds that is.
func pooledCPUPerGB(runs []proxyRun, path, role string, n int, w workload) (perGB float64, rounds int) {
	var cpu, bytes float64
	for _, x := range runs {
		if x.Path == path && x.Role == role && x.Conns == n && x.Workload == w && x.Error == "" && x.ProxyCPUSeconds != nil {
			cpu += *x.ProxyCPUSeconds
			bytes += float64(x.Messages) * float64(w.Size)
			rounds++
		}
	}
	if bytes == 0 {
		return 0, 0
	}
	return cpu / (bytes / 1e9), rounds
}

// proxyGoals compares the run against the goals of issue 16: framed against passthrough CPU,
// idle memory, added latency.
func proxyGoals(r *proxyResults) []goal {
	var g []goal
	for _, role := range r.Config.Roles {
		for _, w := range goalWorkloads {
			g = append(g, framedVsPassthroughGoal(r, role, w))
		}
	}
	g = append(g, idleMemoryGoals(r.Idle)...)
	for _, p := range []string{pathPulsarProxy, pathPulsarProxyFramed} {
		g = append(g, addedLatencyGoal(r, p))
	}
	for _, role := range r.Config.Roles {
		for _, n := range r.Config.Conns {
			if n > 1 { // one client shares nothing
				g = append(g, multiplexGoals(r, role, n)...)
			}
		}
	}
	return g
}

// The goals of issue 30: the multiplexed path against one broker connection per client
// (framed), in every workload.
const (
	goalMuxCPU        = 1.0 // multiplexed CPU s/GB over framed's, at most
	goalMuxThroughput = 0.9 // multiplexed throughput over framed's, at least
)

// multiplexGoals are the multiplexed path's worst CPU s/GB ratio and worst throughput ratio
// to the framed path over the workloads of role at n connections, each workload's ratio in
// the spread; none when the multiplexed path was not run.
func multiplexGoals(r *proxyResults, role string, n int) []goal {
	var cpu, thr []string
	worstCPU, worstThr, cells := 0.0, math.Inf(1), 0
	for _, w := range r.Config.Workloads {
		m, f := r.cell(pathPulsarProxyMultiplex, role, n, w), r.cell(pathPulsarProxyFramed, role, n, w)
		if m == nil || f == nil || m.Rounds == 0 || f.Rounds == 0 || m.CPUSecondsPerGB == nil || f.CPUSecondsPerGB == nil || f.MsgsPerSec == 0 {
			continue
		}
		c, t := *m.CPUSecondsPerGB / *f.CPUSecondsPerGB, m.MsgsPerSec/f.MsgsPerSec
		cpu, thr = append(cpu, fmt.Sprintf("%s %.2f×", w.label(), c)), append(thr, fmt.Sprintf("%s %.2f×", w.label(), t))
		worstCPU, worstThr, cells = max(worstCPU, c), min(worstThr, t), cells+1
	}
	if cells == 0 {
		return nil
	}
	what := fmt.Sprintf("%d %ss, every workload (%d), the worst", n, role, cells)
	return []goal{
		{Goal: "multiplexed CPU s/GB vs framed, " + what, Target: fmt.Sprintf("<= %.1fx", goalMuxCPU), Value: worstCPU, Unit: "x",
			Met: worstCPU <= goalMuxCPU, Spread: strings.Join(cpu, ", ")},
		{Goal: "multiplexed throughput vs framed, " + what, Target: fmt.Sprintf(">= %.1fx", goalMuxThroughput), Value: worstThr, Unit: "x",
			Met: worstThr >= goalMuxThroughput, Spread: strings.Join(thr, ", ")},
	}
}

// framedVsPassthroughGoal is framed's pooled CPU s/GB over passthrough's for role and w at the
// headline connection count, with its spread round by round.
func framedVsPassthroughGoal(r *proxyResults, role string, w workload) goal {
	n := r.Config.HeadlineConns
	pt, ptRounds := pooledCPUPerGB(r.Runs, pathPulsarProxy, role, n, w)
	fr, frRounds := pooledCPUPerGB(r.Runs, pathPulsarProxyFramed, role, n, w)
	name := fmt.Sprintf("framed CPU s/GB vs passthrough, %s, %d %ss", w.label(), n, role)
	target := fmt.Sprintf("<= %.1fx", goalFramedVsPassthrough)
	if ptRounds == 0 || frRounds == 0 || pt <= 0 {
		return goal{Goal: name + " (not measured)", Target: target, Value: math.NaN(), Unit: "x"}
	}
	name += fmt.Sprintf(" (%d and %d rounds pooled)", frRounds, ptRounds)
	v := fr / pt
	return goal{Goal: name, Target: target, Value: v, Unit: "x", Met: v <= goalFramedVsPassthrough,
		Spread: ratioSpread(roundRatios(r.Runs, role, n, w))}
}

// ratioSpread describes sorted round-by-round ratios: range, median and how many are over the
// goal ("" for none).
func ratioSpread(rs []float64) string {
	if len(rs) == 0 {
		return ""
	}
	over := 0
	for _, x := range rs {
		if x > goalFramedVsPassthrough {
			over++
		}
	}
	return fmt.Sprintf("%d rounds: %.2f–%.2f×, median %.2f×, %d over %.1f×", len(rs), rs[0], rs[len(rs)-1], median(rs), over, goalFramedVsPassthrough)
}

// idleGoals are the idle-memory goals by idlemem's mode: a multiplexed session is held to
// the direct one's (the WebSocket sessions' rows are reported, not held to a goal here).
var idleGoals = map[string]struct {
	target float64
	what   string
}{
	"lookup":             {goalIdleLookupKiB, "idle lookup connection"},
	"direct":             {goalIdleDirectKiB, "idle direct session"},
	"direct multiplexed": {goalIdleDirectKiB, "idle multiplexed direct session"},
}

// idleMemoryGoals is one goal per idlemem row of a mode with a goal that measured RSS growth.
func idleMemoryGoals(rows []idleRow) []goal {
	var g []goal
	for _, row := range rows {
		goalOf, ok := idleGoals[row.Mode]
		if row.RSSKiB == nil || !ok {
			continue
		}
		target, what := goalOf.target, goalOf.what
		g = append(g, goal{Goal: fmt.Sprintf("RSS growth per %s, fresh process, %d connections", what, row.Conns),
			Target: fmt.Sprintf("<= %.0f KiB", target), Value: *row.RSSKiB, Unit: "KiB", Met: *row.RSSKiB <= target})
	}
	return g
}

// addedLatencyGoal is path p's p99 over the direct path's at the goal's rate, with what bounds
// it on this machine.
func addedLatencyGoal(r *proxyResults, p string) goal {
	d, l := r.latency(pathDirect, goalFraction), r.latency(p, goalFraction)
	rate := 0.0
	if d != nil {
		rate = d.Rate
	}
	name := fmt.Sprintf("added p99 over direct, %s, %s at %.0f msg/s (half the direct rate)", p, r.Config.LatencyWorkload.label(), rate)
	target := fmt.Sprintf("<= %.0f µs", goalAddedP99Micros)
	if d == nil || l == nil || d.Samples == 0 || l.Samples == 0 {
		return goal{Goal: name + " (not measured)", Target: target, Value: math.NaN(), Unit: "µs"}
	}
	v := l.P99 - d.P99
	return goal{Goal: name, Target: target, Value: v, Unit: "µs", Met: v <= goalAddedP99Micros,
		Spread: strings.Join(latencyBounds(r, d), "; ")}
}

// latencyBounds are what bounds an added p99 here: HAProxy with splice's, and the echo floor.
func latencyBounds(r *proxyResults, d *proxyLatency) []string {
	var bounds []string
	if h := r.latency(pathHAProxySplice, goalFraction); h != nil && h.Samples > 0 {
		bounds = append(bounds, fmt.Sprintf("HAProxy with splice added %.0f µs", h.P99-d.P99))
	}
	if cross, same := r.echo(true), r.echo(false); cross != nil && same != nil {
		bounds = append(bounds, fmt.Sprintf("a paced echo at rest: p99 %.0f µs between the CPUs, %.0f µs on one (indicative: a proxy on its own CPU crosses twice a round trip)", cross.P99, same.P99))
	}
	return bounds
}

// The files of a proxy-bound run, beside the side-by-side benchmark's latest.*.
const proxyResultsName = "proxy-bound"

func writeProxyResults(r *proxyResults, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	j, err := json.MarshalIndent(jsonSafe(r), "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, proxyResultsName+".json"), append(j, '\n'), 0o644); err != nil {
		return err
	}
	summary, details := proxyMarkdown(r)
	if err := os.WriteFile(filepath.Join(dir, proxyResultsName+".md"), []byte(summary+details), 0o644); err != nil {
		return err
	}
	var img bytes.Buffer
	if err := proxyChart(r, &img); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, proxyResultsName+".png"), img.Bytes(), 0o644)
}

// rerenderProxyResults writes dir's proxy-bound files anew from its JSON: the cells and goals
// from the recorded runs, the Markdown and the chart in the report's current form.
func rerenderProxyResults(dir string) error {
	raw, err := os.ReadFile(filepath.Join(dir, proxyResultsName+".json"))
	if err != nil {
		return err
	}
	var r proxyResults
	if err := json.Unmarshal(raw, &r); err != nil {
		return fmt.Errorf("%s.json: %w", proxyResultsName, err)
	}
	summarizeProxy(&r)
	r.Goals = proxyGoals(&r)
	return writeProxyResults(&r, dir)
}

// jsonSafe returns r with NaN goal values (not measured) as 0: JSON has no NaN.
func jsonSafe(r *proxyResults) *proxyResults {
	c := *r
	c.Goals = append([]goal(nil), r.Goals...)
	for i := range c.Goals {
		if math.IsNaN(c.Goals[i].Value) {
			c.Goals[i].Value = 0
		}
	}
	return &c
}

// ratio renders v/floor as "0.95×", or "—" when either is missing.
func ratio(v, floor float64) string {
	if v <= 0 || floor <= 0 || math.IsNaN(v) || math.IsNaN(floor) {
		return "—"
	}
	return fmt.Sprintf("%.2f×", v/floor)
}

func fmtRate(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// proxy-bound.md holds the summary (what docs/performance.md shows), then the details from
// this heading on.
const proxyDetailsHead = "\n#### Every workload\n"

// proxyMarkdown renders the summary (docs/performance.md's tables) and the details.
func proxyMarkdown(r *proxyResults) (summary, details string) {
	var b strings.Builder
	writeProxyIntro(&b, r)
	for _, role := range r.Config.Roles {
		writeHeadlineTable(&b, r, role)
	}
	b.WriteString(muxComparison(r))
	writeLatencyTables(&b, r)
	writeEchoFloor(&b, r)
	writeIdleTable(&b, r.Idle)
	writeGoalsTable(&b, r.Goals)
	writeProxyFootnote(&b, r.Config)
	return b.String(), proxyDetails(r)
}

// writeProxyIntro writes the title and the paragraph on the machine and the method.
func writeProxyIntro(b *strings.Builder, r *proxyResults) {
	cfg := r.Config
	fmt.Fprintf(b, "### Proxy-bound benchmark (%s, %s)\n\n", r.Date[:10], cfg.Mode)
	fmt.Fprintf(b, "Machine: %d CPUs (%s), Linux %s, %s; load average %s before, %s after (1/5/15 min).",
		r.Machine.CPUs, r.Machine.CPUModel, r.Machine.Kernel, r.Machine.GoVersion, r.LoadAvgBefore, r.LoadAvgAfter)
	if cfg.Note != "" {
		fmt.Fprintf(b, " %s.", strings.TrimSuffix(cfg.Note, "."))
	}
	fmt.Fprintf(b, " Far end: the benchmark's Pulsar speaker (bench/speaker), which answers every SEND at once and generates MESSAGE frames from memory. "+
		"Pinning: %s. %d round(s) of %.1f s per path, workload and connection count, paths interleaved; medians.\n\n",
		r.Pinning, cfg.Rounds, cfg.MeasureSec)
}

// headlineCPUWorkloads are the workloads whose CPU s/GB the headline tables show.
func headlineCPUWorkloads() []workload { return []workload{batched1KiB, plain64KiB} }

// headlineWorkloads are the run's workloads the headline tables show, in the tables' order.
func headlineWorkloads(cfg proxyConfig) []workload {
	var shown []workload
	for _, w := range []workload{batched1KiB, plain100B, plain1KiB, plain64KiB, plain1MiB} {
		if indexOf(cfg.Workloads, w) < len(cfg.Workloads) {
			shown = append(shown, w)
		}
	}
	return shown
}

// inMsgs: the tables give msg/s, not MB/s, for unbatched messages up to 1 KiB.
func inMsgs(w workload) bool { return w.Batch == 1 && w.Size <= 1<<10 }

// writeHeadlineTable writes role's table at the headline connection count: throughput and CPU
// s/GB of every path, with their ratios to HAProxy with splice.
func writeHeadlineTable(b *strings.Builder, r *proxyResults, role string) {
	shown := headlineWorkloads(r.Config)
	fmt.Fprintf(b, "%d %s connections: throughput (MB/s of payload, msg/s for unbatched messages up to 1 KiB), the proxy's CPU s/GB, "+
		"and in parentheses the ratio to HAProxy with splice (the L4 floor).\n\n| path |", r.Config.HeadlineConns, role)
	for _, w := range shown {
		if inMsgs(w) {
			fmt.Fprintf(b, " %s msg/s |", w.label())
		} else {
			fmt.Fprintf(b, " %s MB/s |", w.label())
		}
	}
	for _, w := range headlineCPUWorkloads() {
		fmt.Fprintf(b, " CPU s/GB %s |", w.label())
	}
	b.WriteString("\n|---|")
	for range len(shown) + len(headlineCPUWorkloads()) {
		b.WriteString("--:|")
	}
	b.WriteString("\n")
	for _, path := range r.Paths {
		writeHeadlineRow(b, r, path, role, shown)
	}
	b.WriteString("\n")
}

// writeHeadlineRow writes one path's row of role's headline table.
func writeHeadlineRow(b *strings.Builder, r *proxyResults, path, role string, shown []workload) {
	n := r.Config.HeadlineConns
	fmt.Fprintf(b, "| %s |", path)
	for _, w := range shown {
		b.WriteString(headlineThroughput(r.cell(path, role, n, w), r.cell(pathHAProxySplice, role, n, w), w))
	}
	for _, w := range headlineCPUWorkloads() {
		b.WriteString(headlineCPU(r.cell(path, role, n, w), r.cell(pathHAProxySplice, role, n, w)))
	}
	b.WriteString("\n")
}

// headlineThroughput is a headline cell's throughput and its ratio to floor's (either may be
// nil), with the cell's trailing separator.
func headlineThroughput(c, floor *proxyCell, w workload) string {
	if c == nil {
		return " — |"
	}
	if c.Rounds == 0 {
		return " failed |"
	}
	v, fv := c.MBPerSec, 0.0
	if floor != nil {
		fv = floor.MBPerSec
	}
	if inMsgs(w) {
		v = c.MsgsPerSec
		if floor != nil {
			fv = floor.MsgsPerSec
		}
	}
	return fmt.Sprintf(" %s (%s) |", fmtRate(v), ratio(v, fv))
}

// headlineCPU is a headline cell's CPU s/GB and its ratio to floor's, with the cell's trailing
// separator.
func headlineCPU(c, floor *proxyCell) string {
	if c == nil || c.CPUSecondsPerGB == nil {
		return " — |"
	}
	fv := 0.0
	if floor != nil && floor.CPUSecondsPerGB != nil {
		fv = *floor.CPUSecondsPerGB
	}
	return fmt.Sprintf(" %.2f (%s) |", *c.CPUSecondsPerGB, ratio(*c.CPUSecondsPerGB, fv))
}

// writeLatencyTables writes the latency paragraph and a table per latency rate.
func writeLatencyTables(b *strings.Builder, r *proxyResults) {
	fmt.Fprintf(b, "Latency: SEND to SEND_RECEIPT round trip of %s messages on one producer connection, paced (sent every %d µs), µs; "+
		"added = over the direct path, with its ratio to HAProxy with splice's added p99. \"load CPU\" is the load process's own CPU use "+
		"in the direct runs: near 100%% the round trip is the load process's queue, not the path's. GC cycles: the Go proxies' garbage collections "+
		"over the runs, warm-ups included (go_gc_duration_seconds_count, scraped before and after each run); Nagle's algorithm is off on every socket of the Go paths (Go sets TCP_NODELAY).\n",
		r.Config.LatencyWorkload.label(), r.Config.LatencyTickMicros)
	for _, frac := range r.Config.LatencyFractions {
		writeLatencyTable(b, r, frac)
	}
}

// writeLatencyTable writes the table of the latency runs at frac of the direct path's rate;
// nothing when the direct path has none.
func writeLatencyTable(b *strings.Builder, r *proxyResults, frac float64) {
	d, h := r.latency(pathDirect, frac), r.latency(pathHAProxySplice, frac)
	if d == nil {
		return
	}
	fmt.Fprintf(b, "\nAt %.0f%% of the direct path's rate, %.0f msg/s (load CPU %.0f%%):\n\n", 100*frac, d.Rate, d.GenCPUPercent)
	b.WriteString("| path | p50 / p99 / p99.9 | added p50 / p99 / p99.9 | added p99 vs HAProxy splice | rate reached | GC cycles |\n|---|--:|--:|--:|--:|--:|\n")
	for _, path := range r.Paths {
		l := r.latency(path, frac)
		if l == nil || l.Samples == 0 {
			fmt.Fprintf(b, "| %s | failed | | | | |\n", path)
			continue
		}
		added, vs := "—", "—"
		if d.Samples > 0 && path != pathDirect {
			added = fmt.Sprintf("%.0f / %.0f / %.0f", l.P50-d.P50, l.P99-d.P99, l.P999-d.P999)
			if h != nil && h.Samples > 0 {
				vs = ratio(l.P99-d.P99, h.P99-d.P99)
			}
		}
		fmt.Fprintf(b, "| %s | %.0f / %.0f / %.0f | %s | %s | %.0f%% | %s |\n", path, l.P50, l.P99, l.P999, added, vs, 100*l.RateAchieved/max(l.Rate, 1e-9), opt(l.GCCycles, "%.0f"))
	}
}

// writeEchoFloor writes the machine's echo floor, when both echoes were measured.
func writeEchoFloor(b *strings.Builder, r *proxyResults) {
	cross, same := r.echo(true), r.echo(false)
	if cross == nil || same == nil {
		return
	}
	fmt.Fprintf(b, "\nThe machine's floor, indicative: a TCP echo of one %s message every %d µs at rest (bench/echofloor.go; %d of %d ticks sampled between the CPUs: "+
		"an echo slower than a tick takes the place of the ones it delayed), the client on CPU %d, µs. "+
		"A proxy on its own CPU puts a crossing between the CPUs into each round trip twice (to the proxy and on to the speaker, and back); the direct path never crosses. "+
		"The latency runs above are busier (pipelined, the proxy's CPU partly busy), so this is not a bound to subtract, but the order of what crossing costs here.\n\n"+
		"| echo server | p50 / p99 / p99.9 | over one CPU: p50 / p99 / p99.9 |\n|---|--:|--:|\n", bytesLabel(cross.Bytes), r.Config.LatencyTickMicros,
		cross.Samples, cross.Ticks, r.Config.LoadCPU)
	fmt.Fprintf(b, "| on the load's CPU (%d) | %.0f / %.0f / %.0f | — |\n", same.ServerCPU, same.P50, same.P99, same.P999)
	fmt.Fprintf(b, "| on the proxy's CPU (%d) | %.0f / %.0f / %.0f | %.0f / %.0f / %.0f |\n", cross.ServerCPU, cross.P50, cross.P99, cross.P999,
		cross.P50-same.P50, cross.P99-same.P99, cross.P999-same.P999)
}

// writeIdleTable writes idlemem's rows, if any.
func writeIdleTable(b *strings.Builder, rows []idleRow) {
	if len(rows) == 0 {
		return
	}
	b.WriteString("\nIdle connections on a fresh pulsar-proxy (bench/idlemem: a new process, n connections that CONNECT and stay; per connection):\n\n" +
		"| mode | connections | RSS growth KiB | live heap KiB | goroutines |\n|---|--:|--:|--:|--:|\n")
	for _, row := range rows {
		if row.Skipped != "" {
			fmt.Fprintf(b, "| %s | %d | %s | | |\n", row.Mode, row.Conns, row.Skipped)
			continue
		}
		fmt.Fprintf(b, "| %s | %d | %s | %s | %s |\n", row.Mode, row.Conns, opt(row.RSSKiB, "%.1f"), opt(row.HeapKiB, "%.1f"), opt(row.Goroutines, "%.2f"))
	}
}

// writeGoalsTable writes the goals, "—" for those not measured.
func writeGoalsTable(b *strings.Builder, goals []goal) {
	b.WriteString("\nGoals of issue 16 (reported, not asserted):\n\n| goal | target | measured | met | spread, or what bounds it here |\n|---|---|--:|---|---|\n")
	for _, g := range goals {
		met, val := "no", fmt.Sprintf("%.2f %s", g.Value, g.Unit)
		if g.Met {
			met = "yes"
		}
		if math.IsNaN(g.Value) || strings.HasSuffix(g.Goal, "(not measured)") {
			met, val = "—", "—"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s |\n", g.Goal, g.Target, val, met, g.Spread)
	}
}

// writeProxyFootnote writes how to read the summary's figures.
func writeProxyFootnote(b *strings.Builder, cfg proxyConfig) {
	reached := fmt.Sprintf("%d", cfg.MaxConns)
	fmt.Fprintf(b, "\nCPU s/GB: the proxy process's user+system seconds (/proc/PID/stat) over the measured intervals, per 10^9 payload bytes through it. "+
		"Connections: up to %s (the descriptor limit is %d a process, and a proxied connection takes two in the proxy and two in the load process); "+
		"a fleet that could not be opened is listed under the details. Throughput is the lesser of what the proxy's core and the load process's core "+
		"could carry, on a machine shared with other work: where the proxy's CPU is well below 100%% the load process or another process was the limit "+
		"(the details show both CPUs' use), and CPU s/GB is the figure to compare. Every figure: the details in `bench/results/%s.md`.\n",
		reached, cfg.DescriptorLimit, proxyResultsName)
}

// proxyDetails renders the details: every cell, then what failed, peak RSS and the checks.
func proxyDetails(r *proxyResults) string {
	var dt strings.Builder
	dt.WriteString(proxyDetailsHead)
	dt.WriteString("\nPer role and connection count: msg/s and MB/s; the proxy's CPU s/GB, and the MB/s one core of it would carry at that cost " +
		"(1000 / CPU s per GB); the proxy's own CPU use and how busy its CPU was with anything (the difference is what other processes of the shared " +
		"machine took); the same for the load process (generator and speaker); throughput and CPU s/GB as ratios to HAProxy with splice.\n")
	for _, role := range r.Config.Roles {
		for _, n := range r.Config.Conns {
			writeDetailsTable(&dt, r, role, n)
		}
	}
	writeFailedFleets(&dt, r.Setups)
	writeLatencyErrors(&dt, r.LatencyErrors)
	writePeakRSS(&dt, r.PeakRSSMiB)
	writeChecks(&dt, r.Checks)
	return dt.String()
}

// writeDetailsTable writes the table of every workload and path for role at n connections.
func writeDetailsTable(dt *strings.Builder, r *proxyResults, role string, n int) {
	fmt.Fprintf(dt, "\n%d %s connection(s):\n\n| workload | path | msg/s | MB/s | CPU s/GB | MB/s a core | proxy CPU / busy | load CPU / busy | MB/s vs splice | CPU s/GB vs splice |\n|---|---|--:|--:|--:|--:|--:|--:|--:|--:|\n", n, role)
	for _, w := range r.Config.Workloads {
		floor := r.cell(pathHAProxySplice, role, n, w)
		for _, path := range r.Paths {
			dt.WriteString(detailsRow(r.cell(path, role, n, w), floor, w, path))
		}
	}
}

// detailsRow is the details line of cell c (nil if it did not run) against floor, HAProxy
// with splice's cell (nil if none).
func detailsRow(c, floor *proxyCell, w workload, path string) string {
	if c == nil || c.Rounds == 0 {
		msg := "no run"
		if c != nil && c.Error != "" {
			msg = "failed: " + strings.ReplaceAll(firstLine(c.Error), "|", "/")
		}
		return fmt.Sprintf("| %s | %s | %s | | | | | | | |\n", w.label(), path, msg)
	}
	cpu, core, pct, cpuVs := "—", "—", fmt.Sprintf("— / %.0f%%", c.ProxyCPUBusy), "—"
	if c.CPUSecondsPerGB != nil {
		cpu = fmt.Sprintf("%.2f", *c.CPUSecondsPerGB)
		if *c.CPUSecondsPerGB > 0 {
			core = fmt.Sprintf("%.0f", 1000 / *c.CPUSecondsPerGB)
		}
		pct = fmt.Sprintf("%.0f%% / %.0f%%", *c.ProxyCPUPercent, c.ProxyCPUBusy)
		if floor != nil && floor.CPUSecondsPerGB != nil {
			cpuVs = ratio(*c.CPUSecondsPerGB, *floor.CPUSecondsPerGB)
		}
	}
	mbVs := "—"
	if floor != nil {
		mbVs = ratio(c.MBPerSec, floor.MBPerSec)
	}
	return fmt.Sprintf("| %s | %s | %.0f | %.1f | %s | %s | %s | %.0f%% / %.0f%% | %s | %s |\n", w.label(), path, c.MsgsPerSec, c.MBPerSec,
		cpu, core, pct, c.GenCPUPercent, c.LoadCPUBusy, mbVs, cpuVs)
}

// writeFailedFleets lists the fleets that could not be opened, if any.
func writeFailedFleets(dt *strings.Builder, setups []fleetSetup) {
	var failed []fleetSetup
	for _, s := range setups {
		if s.Error != "" {
			failed = append(failed, s)
		}
	}
	if len(failed) == 0 {
		return
	}
	dt.WriteString("\nFleets that could not be opened:\n\n| path | role | connections | round | opened | error |\n|---|---|--:|--:|--:|---|\n")
	for _, s := range failed {
		fmt.Fprintf(dt, "| %s | %s | %d | %d | %d | %s |\n", s.Path, s.Role, s.Conns, s.Round, s.Opened, strings.ReplaceAll(firstLine(s.Error), "|", "/"))
	}
}

// writeLatencyErrors lists the latency runs that failed, if any.
func writeLatencyErrors(dt *strings.Builder, errs []string) {
	if len(errs) == 0 {
		return
	}
	dt.WriteString("\nLatency runs that failed:\n\n")
	for _, e := range errs {
		fmt.Fprintf(dt, "- %s\n", firstLine(e))
	}
}

// writePeakRSS writes every proxy's peak RSS on one line, if any was read.
func writePeakRSS(dt *strings.Builder, peaks []pathValue) {
	if len(peaks) == 0 {
		return
	}
	dt.WriteString("\nPeak RSS (VmHWM) of each proxy over the whole run, MiB:")
	for _, v := range peaks {
		fmt.Fprintf(dt, " %s %.0f;", v.Path, v.Value)
	}
	dt.WriteString("\n")
}

// writeChecks lists the run's checks, if any.
func writeChecks(dt *strings.Builder, checks []string) {
	if len(checks) == 0 {
		return
	}
	dt.WriteString("\nChecks:\n\n")
	for _, c := range checks {
		fmt.Fprintf(dt, "- %s\n", c)
	}
}

// muxComparison is the table of the multiplexed path beside the framed one (one broker
// connection per client, otherwise configured alike) for every role, connection count and
// workload of the run, with the ratios; "" when the run lacks either path.
func muxComparison(r *proxyResults) string {
	if !slices.Contains(r.Paths, pathPulsarProxyMultiplex) || !slices.Contains(r.Paths, pathPulsarProxyFramed) {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Multiplexed broker connections (%s: the clients share the proxy's broker connections) beside one broker connection per client (%s), "+
		"configured alike otherwise (token authentication and the topic policy on), measured in the same run: throughput (msg/s for unbatched messages up to 1 KiB, "+
		"else MB/s of payload), the proxy's CPU s/GB, and the ratio multiplexed / per client.\n\n"+
		"| role | connections | workload | throughput per client | multiplexed | ratio | CPU s/GB per client | multiplexed | ratio |\n|---|--:|---|--:|--:|--:|--:|--:|--:|\n",
		pathPulsarProxyMultiplex, pathPulsarProxyFramed)
	for _, role := range r.Config.Roles {
		for _, n := range r.Config.Conns {
			for _, w := range r.Config.Workloads {
				fr, mx := r.cell(pathPulsarProxyFramed, role, n, w), r.cell(pathPulsarProxyMultiplex, role, n, w)
				unit := "MB/s"
				if w.Batch == 1 && w.Size <= 1<<10 {
					unit = "msg/s"
				}
				tput := func(c *proxyCell) float64 {
					if c == nil || c.Rounds == 0 {
						return math.NaN()
					}
					if unit == "msg/s" {
						return c.MsgsPerSec
					}
					return c.MBPerSec
				}
				cpu := func(c *proxyCell) float64 {
					if c == nil || c.Rounds == 0 || c.CPUSecondsPerGB == nil {
						return math.NaN()
					}
					return *c.CPUSecondsPerGB
				}
				ft, mt, fc, mc := tput(fr), tput(mx), cpu(fr), cpu(mx)
				fmt.Fprintf(&b, "| %s | %d | %s (%s) | %s | %s | %s | %s | %s | %s |\n", role, n, w.label(), unit,
					orFailed(ft, fmtRate), orFailed(mt, fmtRate), ratio(mt, ft), orFailed(fc, fmtCPU), orFailed(mc, fmtCPU), ratio(mc, fc))
			}
		}
	}
	b.WriteString("\n")
	return b.String()
}

func fmtCPU(v float64) string { return fmt.Sprintf("%.2f", v) }

// orFailed renders v with f, or "failed" when it was not measured (NaN).
func orFailed(v float64, f func(float64) string) string {
	if math.IsNaN(v) {
		return "failed"
	}
	return f(v)
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// proxyChart draws the headline figures: throughput of three workloads, CPU s/GB of two, and
// added p99 latency, the paths side by side in each panel.
func proxyChart(r *proxyResults, w *bytes.Buffer) error {
	n := r.Config.HeadlineConns
	var panels []panel
	for _, wl := range []workload{batched1KiB, plain64KiB, plain1MiB} {
		if indexOf(r.Config.Workloads, wl) == len(r.Config.Workloads) {
			continue
		}
		p := panel{title: fmt.Sprintf("MB/s %s, %d producers", wl.label(), n), format: "%.0f"}
		for _, path := range r.Paths {
			c := r.cell(path, roleProducer, n, wl)
			if c == nil || c.Rounds == 0 {
				p.values = append(p.values, -1)
				continue
			}
			p.values = append(p.values, c.MBPerSec)
		}
		panels = append(panels, p)
	}
	for _, wl := range []workload{batched1KiB, plain64KiB} {
		p := panel{title: fmt.Sprintf("CPU s/GB %s, producers", wl.label()), format: "%.2f"}
		for _, path := range r.Paths {
			c := r.cell(path, roleProducer, n, wl)
			if c == nil {
				p.values = append(p.values, -1)
				continue
			}
			p.values = append(p.values, orNA(c.CPUSecondsPerGB))
		}
		panels = append(panels, p)
	}
	lat := panel{title: "added p99 latency at 50% (µs)", format: "%.0f"}
	d := r.latency(pathDirect, goalFraction)
	for _, path := range r.Paths {
		l := r.latency(path, goalFraction)
		if path == pathDirect || d == nil || l == nil || l.Samples == 0 || d.Samples == 0 {
			lat.values = append(lat.values, -1)
			continue
		}
		lat.values = append(lat.values, math.Max(0, l.P99-d.P99))
	}
	panels = append(panels, lat)

	const pw, ph, margin = 300, 260, 20
	img := image.NewRGBA(image.Rect(0, 0, pw*len(panels)+margin, ph+90))
	draw.Draw(img, img.Bounds(), &image.Uniform{chartBG}, image.Point{}, draw.Src)
	text(img, margin, 18, fmt.Sprintf("pulsar-proxy proxy-bound benchmark, %s, %d CPUs, proxy on one CPU (%s)", r.Date[:10], r.Machine.CPUs, r.Config.Mode))
	for i, p := range panels {
		drawPanel(img, margin+i*pw, 40, pw-margin, ph, p)
	}
	for i, name := range r.Paths {
		x := margin + i*170
		fill(img, image.Rect(x, ph+60, x+14, ph+74), chartColors[i%len(chartColors)])
		text(img, x+20, ph+72, name)
	}
	return png.Encode(w, img)
}
