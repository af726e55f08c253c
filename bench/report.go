//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// results is what one run wrote: bench/results/latest.json.
type results struct {
	Date        string          `json:"date"`
	Machine     machine         `json:"machine"`
	Config      config          `json:"config"`
	DurationSec float64         `json:"durationSeconds"`
	Paths       []string        `json:"paths"`
	Throughput  []throughputRun `json:"throughput"`
	LatencyRate float64         `json:"latencyRateMsgsPerSec"`
	Summary     []pathSummary   `json:"summary"`
	Goals       []goal          `json:"goals"`
}

type machine struct {
	CPUs      int    `json:"cpus"`
	CPUModel  string `json:"cpuModel"`
	Kernel    string `json:"kernel"`
	GoVersion string `json:"goVersion"`
}

type throughputRun struct {
	Path       string  `json:"path"`
	Size       int     `json:"messageSize"`
	Round      int     `json:"round"`
	Messages   int64   `json:"messages"`
	Bytes      int64   `json:"payloadBytes"`
	Seconds    float64 `json:"seconds"`
	MsgsPerSec float64 `json:"msgsPerSec"`
	MBPerSec   float64 `json:"mbPerSec"`
	CPUSeconds float64 `json:"proxyCpuSeconds"`
}

type sizeThroughput struct {
	Size       int     `json:"messageSize"`
	MsgsPerSec float64 `json:"msgsPerSec"`
	MBPerSec   float64 `json:"mbPerSec"`
}

type latency struct {
	Samples int     `json:"samples"`
	P50     float64 `json:"p50Ms"`
	P99     float64 `json:"p99Ms"`
	P999    float64 `json:"p999Ms"`
}

// pathSummary: medians over rounds; proxy-only figures are null for the direct path.
type pathSummary struct {
	Path                 string           `json:"path"`
	Throughput           []sizeThroughput `json:"throughput"`
	Latency              latency          `json:"latency"`
	CPUSecondsPerGB      *float64         `json:"cpuSecondsPerGB"`
	PeakRSSMiB           *float64         `json:"peakRssMiB"`
	IdleKiBPerConnLookup *float64         `json:"idleKiBPerConnLookup"`
	IdleKiBPerConnDirect *float64         `json:"idleKiBPerConnDirect"`
}

type goal struct {
	Goal   string  `json:"goal"`
	Target string  `json:"target"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
	Met    bool    `json:"met"`
	// Spread: how the figure varied, or what bounds it on this machine ("" if not known).
	Spread string `json:"spread,omitempty"`
}

func (r *results) summary(path string) *pathSummary {
	for i := range r.Summary {
		if r.Summary[i].Path == path {
			return &r.Summary[i]
		}
	}
	return nil
}

func (s *pathSummary) throughput(size int) sizeThroughput {
	for _, t := range s.Throughput {
		if t.Size == size {
			return t
		}
	}
	return sizeThroughput{}
}

func deref(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}

// goals compares the run against the targets; they are reported, never asserted.
func goals(r *results) []goal {
	d, pp, j, h := r.summary(pathDirect), r.summary(pathPulsarProxy), r.summary(pathJavaProxy), r.summary(pathHAProxy)
	if d == nil || pp == nil || j == nil || h == nil {
		return nil
	}
	var g []goal
	for _, size := range r.Config.MessageSizes {
		ratio := pp.throughput(size).MsgsPerSec / d.throughput(size).MsgsPerSec
		g = append(g, goal{Goal: fmt.Sprintf("throughput through pulsar-proxy vs direct, %s messages", sizeLabel(size)),
			Target: ">= 95%", Value: 100 * ratio, Unit: "%", Met: ratio >= 0.95})
	}
	cpu := deref(pp.CPUSecondsPerGB)
	vsH, vsJ := cpu/deref(h.CPUSecondsPerGB), cpu/deref(j.CPUSecondsPerGB)
	g = append(g,
		goal{Goal: "CPU s/GB vs HAProxy", Target: "<= 1.3x", Value: vsH, Unit: "x", Met: vsH <= 1.3},
		goal{Goal: "CPU s/GB vs the Java proxy", Target: "<= 0.5x", Value: vsJ, Unit: "x", Met: vsJ <= 0.5})
	added := pp.Latency.P99 - d.Latency.P99
	g = append(g, goal{Goal: fmt.Sprintf("added p99 latency over direct at %.0f msg/s", r.LatencyRate),
		Target: "<= 0.2 ms", Value: added, Unit: "ms", Met: added <= 0.2})
	for _, m := range []struct {
		name string
		v    *float64
	}{{"lookup", pp.IdleKiBPerConnLookup}, {"direct", pp.IdleKiBPerConnDirect}} {
		g = append(g, goal{Goal: "RSS per idle connection, " + m.name + " mode", Target: "<= 16 KiB", Value: deref(m.v), Unit: "KiB", Met: deref(m.v) <= 16})
	}
	return g
}

func sizeLabel(n int) string {
	if n >= 1<<10 {
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

func writeResults(r *results, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	j, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "latest.json"), append(j, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "latest.md"), []byte(markdown(r)), 0o644); err != nil {
		return err
	}
	var png bytes.Buffer
	if err := chart(r, &png); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "latest.png"), png.Bytes(), 0o644)
}

func opt(p *float64, format string) string {
	if p == nil {
		return "—"
	}
	return fmt.Sprintf(format, *p)
}

// markdown renders the summary table that docs/performance.md shows.
func markdown(r *results) string {
	var b strings.Builder
	fmt.Fprintf(&b, "### Side-by-side benchmark (%s, %s)\n\n", r.Date[:10], r.Config.Mode)
	fmt.Fprintf(&b, "Machine: %d CPUs (%s), Linux %s, %s.", r.Machine.CPUs, r.Machine.CPUModel, r.Machine.Kernel, r.Machine.GoVersion)
	if r.Config.Note != "" {
		fmt.Fprintf(&b, " %s.", strings.TrimSuffix(r.Config.Note, "."))
	}
	fmt.Fprintf(&b, " One broker of the test rig; %d round(s) of %.0f s per path and size, paths interleaved; medians.\n\n",
		r.Config.Rounds, r.Config.MeasureSec)
	b.WriteString("| path |")
	for _, s := range r.Config.MessageSizes {
		fmt.Fprintf(&b, " %s msg/s | %s MB/s |", sizeLabel(s), sizeLabel(s))
	}
	fmt.Fprintf(&b, " p50 / p99 / p99.9 ms at %.0f msg/s | CPU s/GB | peak RSS MiB | idle KiB/conn lookup / direct |\n|---|", r.LatencyRate)
	for range r.Config.MessageSizes {
		b.WriteString("--:|--:|")
	}
	b.WriteString("--:|--:|--:|--:|\n")
	for _, s := range r.Summary {
		fmt.Fprintf(&b, "| %s |", s.Path)
		for _, size := range r.Config.MessageSizes {
			t := s.throughput(size)
			fmt.Fprintf(&b, " %.0f | %.1f |", t.MsgsPerSec, t.MBPerSec)
		}
		idle := "—"
		if s.IdleKiBPerConnLookup != nil {
			idle = opt(s.IdleKiBPerConnLookup, "%.1f") + " / " + opt(s.IdleKiBPerConnDirect, "%.1f")
		}
		fmt.Fprintf(&b, " %.2f / %.2f / %.2f | %s | %s | %s |\n", s.Latency.P50, s.Latency.P99, s.Latency.P999,
			opt(s.CPUSecondsPerGB, "%.2f"), opt(s.PeakRSSMiB, "%.0f"), idle)
	}
	b.WriteString("\nGoals (reported, not asserted):\n\n| goal | target | measured | met |\n|---|---|--:|---|\n")
	for _, g := range r.Goals {
		met := "no"
		if g.Met {
			met = "yes"
		}
		fmt.Fprintf(&b, "| %s | %s | %.2f %s | %s |\n", g.Goal, g.Target, g.Value, g.Unit, met)
	}
	b.WriteString("\nCPU s/GB: the proxy process's user+system seconds (/proc/PID/stat) over the measured " +
		"intervals, per 10^9 payload bytes through it (each message counted in and out). " +
		"Idle KiB/conn: RSS growth with 1,000 connections that only CONNECT, divided by 1,000; for HAProxy both modes are " +
		"the same TCP relay. Latency: send to receive of 1 KiB messages, one process, one clock.\n")
	return b.String()
}

var (
	chartBG     = color.RGBA{255, 255, 255, 255}
	chartInk    = color.RGBA{30, 30, 30, 255}
	chartColors = []color.RGBA{{110, 110, 110, 255}, {31, 119, 180, 255}, {214, 39, 40, 255}, {44, 160, 44, 255},
		{255, 127, 14, 255}, {148, 103, 189, 255}}
)

type panel struct {
	title  string
	values []float64 // one per path, in r.Paths order; <0 = not applicable
	format string
}

// chart draws one bar panel per figure, the paths side by side in each.
func chart(r *results, w *bytes.Buffer) error {
	var panels []panel
	for _, size := range r.Config.MessageSizes {
		p := panel{title: "throughput " + sizeLabel(size) + " (MB/s)", format: "%.1f"}
		for _, name := range r.Paths {
			p.values = append(p.values, r.summary(name).throughput(size).MBPerSec)
		}
		panels = append(panels, p)
	}
	p99 := panel{title: "p99 latency (ms)", format: "%.2f"}
	cpu := panel{title: "proxy CPU s/GB", format: "%.1f"}
	idle := panel{title: "idle KiB/conn (direct mode)", format: "%.1f"}
	for _, name := range r.Paths {
		s := r.summary(name)
		p99.values = append(p99.values, s.Latency.P99)
		cpu.values = append(cpu.values, orNA(s.CPUSecondsPerGB))
		idle.values = append(idle.values, orNA(s.IdleKiBPerConnDirect))
	}
	panels = append(panels, p99, cpu, idle)

	const pw, ph, margin = 300, 260, 20
	img := image.NewRGBA(image.Rect(0, 0, pw*len(panels)+margin, ph+90))
	draw.Draw(img, img.Bounds(), &image.Uniform{chartBG}, image.Point{}, draw.Src)
	text(img, margin, 18, fmt.Sprintf("pulsar-proxy side-by-side benchmark, %s, %d CPUs (%s)", r.Date[:10], r.Machine.CPUs, r.Config.Mode))
	for i, p := range panels {
		x0 := margin + i*pw
		drawPanel(img, x0, 40, pw-margin, ph, p)
	}
	// legend
	for i, name := range r.Paths {
		x := margin + i*170
		fill(img, image.Rect(x, ph+60, x+14, ph+74), chartColors[i%len(chartColors)])
		text(img, x+20, ph+72, name)
	}
	return png.Encode(w, img)
}

func orNA(p *float64) float64 {
	if p == nil {
		return -1
	}
	return *p
}

func drawPanel(img *image.RGBA, x0, y0, w, h int, p panel) {
	text(img, x0, y0+10, p.title)
	top, bottom := y0+30, y0+h
	maxV := 0.0
	for _, v := range p.values {
		maxV = max(maxV, v)
	}
	fill(img, image.Rect(x0, bottom, x0+w, bottom+1), chartInk)
	n := len(p.values)
	bw := w / (n*2 + 1)
	for i, v := range p.values {
		x := x0 + bw + i*2*bw
		if v < 0 {
			text(img, x, bottom-4, "n/a")
			continue
		}
		hgt := 0
		if maxV > 0 {
			hgt = int(float64(bottom-top-14) * v / maxV)
		}
		fill(img, image.Rect(x, bottom-hgt, x+bw, bottom), chartColors[i%len(chartColors)])
		text(img, x-4, bottom-hgt-3, fmt.Sprintf(p.format, v))
	}
}

func fill(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	draw.Draw(img, r, &image.Uniform{c}, image.Point{}, draw.Src)
}

func text(img *image.RGBA, x, y int, s string) {
	d := font.Drawer{Dst: img, Src: &image.Uniform{chartInk}, Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

// writeJSON writes v, indented, as dir/name.json (dir made if missing).
func writeJSON(dir, name string, v any) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	j, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".json"), append(j, '\n'), 0o644)
}

// writeMarkdown prints md and writes it as dir/name.md.
func writeMarkdown(dir, name, md string) error {
	fmt.Print(md)
	return os.WriteFile(filepath.Join(dir, name+".md"), []byte(md), 0o644)
}

// readJSON reads dir/name.json into v.
func readJSON(dir, name string, v any) error {
	raw, err := os.ReadFile(filepath.Join(dir, name+".json"))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%s.json: %w", name, err)
	}
	return nil
}
