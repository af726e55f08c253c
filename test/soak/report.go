// Package soak holds `make soak`: one pulsar-proxy process under 30 minutes of mixed load
// (connection churn, lookups, produce and consume, TLS handshakes, token refreshes) against
// the real brokers of a rig of its own, with the proxy's memory, goroutines, descriptors and
// heap sampled from its /metrics. TestSoak runs only when SOAK_DURATION is set; this file and
// plot.go turn its samples into soak.csv, summary.md and soak.png.
package soak

import (
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"
)

// Sample is one scrape of the proxy's /metrics, At after the load began.
type Sample struct {
	At            time.Duration
	RSS           float64 // process_resident_memory_bytes
	HeapInuse     float64 // go_memstats_heap_inuse_bytes
	HeapAlloc     float64 // go_memstats_heap_alloc_bytes
	Goroutines    float64 // go_goroutines
	FDs           float64 // process_open_fds
	Sessions      float64 // pulsar_proxy_sessions_active, all modes
	SessionsTotal float64 // pulsar_proxy_sessions_total, all modes
	Refreshes     float64 // pulsar_proxy_credential_refreshes_total{result="ok"}
	Acked         float64 // messages the flows' producers had acknowledged
	Received      float64 // of those, received by the flows' consumers
}

// Series is one tracked resource: its name, unit and how to read it from a sample.
type Series struct {
	Name  string
	Bytes bool
	Get   func(Sample) float64
}

// Tracked are the resources whose slope the soak reports.
var Tracked = []Series{
	{"RSS", true, func(s Sample) float64 { return s.RSS }},
	{"heap in use", true, func(s Sample) float64 { return s.HeapInuse }},
	{"goroutines", false, func(s Sample) float64 { return s.Goroutines }},
	{"open FDs", false, func(s Sample) float64 { return s.FDs }},
	{"sessions active", false, func(s Sample) float64 { return s.Sessions }},
}

// CSVHeader is the first line of soak.csv; CSVRow writes one sample under it.
const CSVHeader = "elapsed_s,rss_bytes,heap_inuse_bytes,heap_alloc_bytes,goroutines,open_fds,sessions_active,sessions_total,credential_refreshes_ok,messages_acked,messages_received\n"

// CSVRow writes s as one line of soak.csv.
func CSVRow(w io.Writer, s Sample) error {
	_, err := fmt.Fprintf(w, "%.1f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f\n", s.At.Seconds(), s.RSS, s.HeapInuse,
		s.HeapAlloc, s.Goroutines, s.FDs, s.Sessions, s.SessionsTotal, s.Refreshes, s.Acked, s.Received)
	return err
}

// Slope is the least-squares slope of ys over xs (0 with fewer than two distinct xs).
func Slope(xs, ys []float64) float64 {
	n := float64(len(xs))
	if len(xs) < 2 || len(xs) != len(ys) {
		return 0
	}
	var sx, sy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
	}
	mx, my := sx/n, sy/n
	var num, den float64
	for i := range xs {
		num += (xs[i] - mx) * (ys[i] - my)
		den += (xs[i] - mx) * (xs[i] - mx)
	}
	if den == 0 {
		return 0
	}
	return num / den
}

// Trend is a tracked resource over the run: first and last samples, and its fitted slope and
// mean over the window after warm-up.
type Trend struct {
	Series
	Start, End, Min, Max float64
	Mean, PerHour        float64
}

// RelPerHour is the slope as a fraction of the window's mean, per hour.
func (t Trend) RelPerHour() float64 {
	if t.Mean == 0 {
		return 0
	}
	return t.PerHour / t.Mean
}

// Trends fits each tracked series over the samples taken at or after from (the warm-up
// before it is left out of the fit but not of start, min and max).
func Trends(samples []Sample, from time.Duration) []Trend {
	var out []Trend
	if len(samples) == 0 {
		return out
	}
	for _, s := range Tracked {
		t := Trend{Series: s, Start: s.Get(samples[0]), End: s.Get(samples[len(samples)-1]), Min: math.Inf(1), Max: math.Inf(-1)}
		var xs, ys []float64
		for _, sm := range samples {
			v := s.Get(sm)
			t.Min, t.Max = math.Min(t.Min, v), math.Max(t.Max, v)
			if sm.At >= from {
				xs, ys = append(xs, sm.At.Hours()), append(ys, v)
				t.Mean += v
			}
		}
		if len(ys) > 0 {
			t.Mean /= float64(len(ys))
		}
		t.PerHour = Slope(xs, ys)
		out = append(out, t)
	}
	return out
}

// Format shows v in MiB for byte series, as a count otherwise.
func (s Series) Format(v float64) string {
	if s.Bytes {
		return fmt.Sprintf("%.1f MiB", v/(1<<20))
	}
	return fmt.Sprintf("%.0f", v)
}

// FormatSlope is Format for a slope per hour, signed, with a decimal for counts.
func (s Series) FormatSlope(v float64) string {
	if s.Bytes {
		return fmt.Sprintf("%+.2f MiB/h", v/(1<<20))
	}
	return fmt.Sprintf("%+.1f /h", v)
}

// Run is what summary.md says about the run besides the trends.
type Run struct {
	Date, Commit, Command string
	Duration, WarmUp      time.Duration
	Facts                 []string // one line each: messages, connections, refreshes, errors
	Trends                []Trend
	Final, AfterClose     Sample // the last sample under load; one after every client closed
}

// Markdown is summary.md.
func Markdown(r Run) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Soak: %s of mixed load through one pulsar-proxy\n\n", r.Duration)
	fmt.Fprintf(&b, "%s, commit `%s`, `%s` (samples in soak.csv, chart in soak.png).\n\n", r.Date, r.Commit, r.Command)
	for _, f := range r.Facts {
		fmt.Fprintf(&b, "- %s\n", f)
	}
	fmt.Fprintf(&b, "\nSlopes are least-squares fits over the samples after the first %s (warm-up), per hour; "+
		"relative = slope / mean over that window.\n\n", r.WarmUp)
	b.WriteString("| resource | start | end of load | min | max | slope | relative | after all clients closed |\n|---|---|---|---|---|---|---|---|\n")
	for _, t := range r.Trends {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %+.1f%%/h | %s |\n", t.Name, t.Format(t.Start), t.Format(t.End),
			t.Format(t.Min), t.Format(t.Max), t.FormatSlope(t.PerHour), 100*t.RelPerHour(), t.Format(t.Get(r.AfterClose)))
	}
	return b.String()
}

// docs/reliability.md shows the last summary, its title left out, between these markers;
// `make soak` writes it there when it writes the checkout's own results (a test of the
// operator's pages, tools/docscheck, fails when the two disagree).
const (
	PageBegin = "<!-- soak:begin (written by make soak) -->"
	PageEnd   = "<!-- soak:end -->"
)

// PageBlock is what the page shows of a summary: everything after its title line.
func PageBlock(summary string) string {
	_, rest, _ := strings.Cut(summary, "\n\n")
	return rest
}

// UpdatePage writes summary's block into the page file between the markers.
func UpdatePage(page, summary string) error {
	raw, err := os.ReadFile(page)
	if err != nil {
		return err
	}
	s := string(raw)
	i, j := strings.Index(s, PageBegin), strings.Index(s, PageEnd)
	if i < 0 || j < i {
		return fmt.Errorf("%s: no %q ... %q markers", page, PageBegin, PageEnd)
	}
	s = s[:i+len(PageBegin)] + "\n" + PageBlock(summary) + s[j:]
	return os.WriteFile(page, []byte(s), 0o644)
}
