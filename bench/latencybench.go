//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"
)

// The paired latency benchmark (-proxy-bound -latency, `make bench-latency`): added p99
// restated for this machine. In front of the speaker, pinned as in the proxy-bound benchmark,
// one paced producer connection of 1 KiB messages at half the direct path's rate goes through
// every path in turn, Rounds times, the order rotated each round. Each round's added p99 is a
// path's p99 less the direct path's in the same round; the figure is the median over the
// rounds, with their range, beside HAProxy with splice's. Results:
// bench/results/latency.{json,md}.

type latencyPathFigures struct {
	Path         string  `json:"path"`
	Samples      int     `json:"samples"`
	P50          float64 `json:"p50Micros"`
	P99          float64 `json:"p99Micros"`
	P999         float64 `json:"p999Micros"`
	RateAchieved float64 `json:"rateAchievedMsgsPerSec"`
	Error        string  `json:"error,omitempty"`
}

type latencyRound struct {
	Round int                  `json:"round"`
	Paths []latencyPathFigures `json:"paths"`
}

type latencyResults struct {
	Date       string         `json:"date"`
	Machine    machine        `json:"machine"`
	Rounds     int            `json:"rounds"`
	Fraction   float64        `json:"fraction"`
	DirectRate float64        `json:"directRateMsgsPerSec"` // one connection, unpaced: the median of three runs
	Rate       float64        `json:"rateMsgsPerSec"`
	TickMicros int            `json:"tickMicros"`
	Workload   string         `json:"workload"`
	Paths      []string       `json:"paths"`
	Runs       []latencyRound `json:"runs"`
	Note       string         `json:"note,omitempty"`
}

// latencyPaths are the paths of the paired latency benchmark: the direct path the others are
// compared with, the three pulsar-proxy paths, and HAProxy with splice, the bound.
var latencyPaths = []string{pathDirect, pathPulsarProxy, pathPulsarProxyFramed, pathPulsarProxyMultiplex, pathHAProxySplice}

func runLatencyBench(cfg proxyConfig, outDir string, rounds int) error {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	cfg.Only, cfg.Conns, cfg.IdleConns = latencyPaths, []int{1}, nil
	cfg, err := resolveProxyConfig(cfg, outDir, 1)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "pulsar-proxy-bench-latency-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin, _, err := buildProxyBinaries(dir)
	if err != nil {
		return err
	}
	sp, err := pinnedSpeaker(cfg.LoadCPU)
	if err != nil {
		return err
	}
	defer sp.Close()
	b := &proxyBench{ctx: ctx, cfg: cfg, res: newProxyResults(cfg), sp: sp, baseFDs: map[string]int{},
		warm: secs(cfg.WarmupSec), meas: secs(cfg.MeasureSec)}
	b.paths, err = startProxyPaths(ctx, dir, bin, sp.Addr(), cfg)
	defer b.stopPaths()
	if err != nil {
		return err
	}
	res, err := b.pairedLatency(rounds)
	if err != nil {
		return err
	}
	res.Note = cfg.Note
	return writeLatencyResults(res, outDir)
}

// pairedLatency warms the paths up, measures the direct rate, then runs the paced rounds.
func (b *proxyBench) pairedLatency(rounds int) (*latencyResults, error) {
	for _, p := range b.paths {
		b.baseFDs[p.Name] = 0
		if p.pid != 0 {
			b.baseFDs[p.Name] = openFiles(p.pid)
		}
	}
	if err := b.warmUp(); err != nil {
		return nil, err
	}
	w := b.cfg.LatencyWorkload
	direct := b.paths[0] // the starters' order: direct first
	if direct.Name != pathDirect {
		return nil, fmt.Errorf("the first path is %s, not %s", direct.Name, pathDirect)
	}
	for round := range 3 {
		b.runFleet(direct, roleProducer, 1, round, []workload{w})
		b.settle(direct)
	}
	res := &latencyResults{Date: time.Now().UTC().Format(time.RFC3339), Machine: thisMachine(), Rounds: rounds, Fraction: goalFraction,
		TickMicros: b.cfg.LatencyTickMicros, Workload: w.label()}
	res.DirectRate = proxyMedian(b.res.Runs, pathDirect, roleProducer, 1, w, func(r proxyRun) float64 { return r.MsgsPerSec })
	res.Rate = goalFraction * res.DirectRate
	for _, p := range b.paths {
		res.Paths = append(res.Paths, p.Name)
	}
	for round := range rounds {
		lr := latencyRound{Round: round}
		for i := range b.paths {
			if b.ctx.Err() != nil {
				return nil, b.ctx.Err()
			}
			p := b.paths[(i+round)%len(b.paths)]
			lr.Paths = append(lr.Paths, b.latencyFigures(p, res.Rate))
		}
		log("latency round %d: %s", round, lr.line())
		res.Runs = append(res.Runs, lr)
	}
	return res, nil
}

// latencyFigures is one paced run through p at rate.
func (b *proxyBench) latencyFigures(p *path, rate float64) latencyPathFigures {
	f := latencyPathFigures{Path: p.Name}
	r, err := b.pacedRun(p, rate)
	if err != nil {
		f.Error = err.Error()
		return f
	}
	d := r.fr.Latencies
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	f.Samples, f.P50, f.P99, f.P999 = len(d), micros(d, 0.50), micros(d, 0.99), micros(d, 0.999)
	f.RateAchieved = float64(r.fr.Messages) / r.fr.Seconds
	return f
}

func (lr latencyRound) figures(path string) *latencyPathFigures {
	for i := range lr.Paths {
		if lr.Paths[i].Path == path && lr.Paths[i].Error == "" && lr.Paths[i].Samples > 0 {
			return &lr.Paths[i]
		}
	}
	return nil
}

func (lr latencyRound) line() string {
	var parts []string
	for _, name := range latencyPaths {
		if f := lr.figures(name); f != nil {
			parts = append(parts, fmt.Sprintf("%s p99 %.0f µs", name, f.P99))
		}
	}
	return strings.Join(parts, ", ")
}

// addedP99 are path's added p99s, round by round (the rounds where it and the direct path
// both measured).
func (r *latencyResults) addedP99(path string) []float64 {
	var v []float64
	for _, lr := range r.Runs {
		d, f := lr.figures(pathDirect), lr.figures(path)
		if d != nil && f != nil {
			v = append(v, f.P99-d.P99)
		}
	}
	return v
}

// reached is the median of the rates path reached over its rounds.
func (r *latencyResults) reached(path string) float64 {
	var v []float64
	for _, lr := range r.Runs {
		if f := lr.figures(path); f != nil {
			v = append(v, f.RateAchieved)
		}
	}
	return median(v)
}

// notAbove counts the rounds where path's added p99 is no higher than HAProxy with splice's
// in the same round, out of the rounds where both measured.
func (r *latencyResults) notAbove(path string) (k, n int) {
	for _, lr := range r.Runs {
		d, f, h := lr.figures(pathDirect), lr.figures(path), lr.figures(pathHAProxySplice)
		if d == nil || f == nil || h == nil {
			continue
		}
		n++
		if f.P99 <= h.P99 {
			k++
		}
	}
	return k, n
}

func renderLatency(r *latencyResults) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Added latency, paired rounds\n\n%s, %d CPUs, %s. %s\n\n", r.Date, r.Machine.CPUs, r.Machine.CPUModel, r.Note)
	fmt.Fprintf(&b, "One producer connection, %s messages paced every %d µs at %.0f msg/s (half the direct path's %.0f msg/s), "+
		"through each path in turn, %d rounds, the order rotated each round; the proxy under test on one CPU, the load and the "+
		"speaker on the other (`bin/bench -proxy-bound -latency`). Added p99: a path's p99 less the direct path's in the same round, µs. "+
		"Goal: the median added p99 no higher than HAProxy with splice's.\n\n", r.Workload, r.TickMicros, r.Rate, r.DirectRate, r.Rounds)
	b.WriteString("| path | rounds | added p99: median | range | no higher than HAProxy splice's, rounds | rate reached, median | goal met |\n|---|--:|--:|--:|--:|--:|---|\n")
	hap := median(r.addedP99(pathHAProxySplice))
	for _, p := range r.Paths[1:] {
		v := r.addedP99(p)
		if len(v) == 0 {
			fmt.Fprintf(&b, "| %s | 0 | — | — | — | — | — |\n", p)
			continue
		}
		sort.Float64s(v)
		k, n := r.notAbove(p)
		met := "—"
		if p != pathHAProxySplice {
			met = map[bool]string{true: "yes", false: "no"}[median(v) <= hap]
		}
		fmt.Fprintf(&b, "| %s | %d | %.0f | %.0f–%.0f | %d of %d | %.0f%% | %s |\n", p, len(v), median(v), v[0], v[len(v)-1], k, n, 100*r.reached(p)/r.Rate, met)
	}
	b.WriteString("\nEach round's p50 / p99 / p99.9, µs:\n\n| round |")
	for _, p := range r.Paths {
		fmt.Fprintf(&b, " %s |", p)
	}
	b.WriteString("\n|--:|" + strings.Repeat("--:|", len(r.Paths)) + "\n")
	for _, lr := range r.Runs {
		fmt.Fprintf(&b, "| %d |", lr.Round)
		for _, p := range r.Paths {
			if f := lr.figures(p); f != nil {
				fmt.Fprintf(&b, " %.0f / %.0f / %.0f |", f.P50, f.P99, f.P999)
			} else {
				b.WriteString(" failed |")
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

func writeLatencyResults(r *latencyResults, dir string) error {
	if err := writeJSON(dir, "latency", r); err != nil {
		return err
	}
	return writeMarkdown(dir, "latency", renderLatency(r))
}

// rerenderLatency writes latency.md anew from latency.json.
func rerenderLatency(dir string) error {
	var r latencyResults
	if err := readJSON(dir, "latency", &r); err != nil {
		return err
	}
	return writeMarkdown(dir, "latency", renderLatency(&r))
}
