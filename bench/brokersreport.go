//go:build linux

package main

import (
	"bytes"
	"fmt"
	"image"
	"image/draw"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// brokersFigures are one run's figures per client and per message.
type brokersFigures struct {
	msgPerSec                     float64
	brokerConns                   float64
	heapKiB, directKiB, threads   float64 // broker 1's growth with the clients: per client (KiB), threads in all
	brokerUsPerMsg, proxyUsPerMsg float64
	brokerMsPerClientMin          float64 // broker CPU per client and minute, ms
	proxyRSSKiB                   float64 // the proxy's RSS growth per client
}

func (r brokersRun) figures() brokersFigures {
	n, msgs := float64(r.Clients), float64(max(r.Messages, 1))
	return brokersFigures{
		msgPerSec:            float64(r.Messages) / r.MeasuredSec,
		brokerConns:          r.Loaded.Connections,
		heapKiB:              (r.Loaded.HeapBytes - r.Idle.HeapBytes) / n / 1024,
		directKiB:            (r.Loaded.DirectBytes - r.Idle.DirectBytes) / n / 1024,
		threads:              r.Loaded.Threads - r.Idle.Threads,
		brokerUsPerMsg:       r.BrokerCPU / msgs * 1e6,
		proxyUsPerMsg:        r.ProxyCPU / msgs * 1e6,
		brokerMsPerClientMin: r.BrokerCPU / n / r.MeasuredSec * 60 * 1000,
		proxyRSSKiB:          float64(r.Loaded.ProxyRSSKiB-r.Idle.ProxyRSSKiB) / n,
	}
}

func (r brokersRun) line() string {
	f := r.figures()
	return fmt.Sprintf("%.0f msg/s (%d sent, %d acknowledged), %d send errors; broker: %.0f connections, heap +%.1f KiB/client, direct +%.1f KiB/client, threads %+.0f, %.0f µs CPU/msg; proxy: +%.1f KiB RSS/client, %.0f µs CPU/msg",
		f.msgPerSec, r.Sent, r.Messages, r.SendErrors, f.brokerConns, f.heapKiB, f.directKiB, f.threads, f.brokerUsPerMsg, f.proxyRSSKiB, f.proxyUsPerMsg)
}

// brokersMedian is the median of each figure over a path's runs.
func brokersMedian(runs []brokersRun, path string) brokersFigures {
	var fs []brokersFigures
	for _, r := range runs {
		if r.Path == path && r.MeasuredSec > 0 {
			fs = append(fs, r.figures())
		}
	}
	med := func(get func(brokersFigures) float64) float64 {
		v := make([]float64, len(fs))
		for i, f := range fs {
			v[i] = get(f)
		}
		return median(v)
	}
	return brokersFigures{
		msgPerSec: med(func(f brokersFigures) float64 { return f.msgPerSec }), brokerConns: med(func(f brokersFigures) float64 { return f.brokerConns }),
		heapKiB: med(func(f brokersFigures) float64 { return f.heapKiB }), directKiB: med(func(f brokersFigures) float64 { return f.directKiB }),
		threads: med(func(f brokersFigures) float64 { return f.threads }), brokerUsPerMsg: med(func(f brokersFigures) float64 { return f.brokerUsPerMsg }),
		proxyUsPerMsg:        med(func(f brokersFigures) float64 { return f.proxyUsPerMsg }),
		brokerMsPerClientMin: med(func(f brokersFigures) float64 { return f.brokerMsPerClientMin }),
		proxyRSSKiB:          med(func(f brokersFigures) float64 { return f.proxyRSSKiB }),
	}
}

// brokersRow is one figure of the table: its name, format and value.
type brokersRow struct {
	name, chart, format string // chart: the title of its panel (the chart's font has no µ)
	get                 func(brokersFigures) float64
}

var brokersRows = []brokersRow{
	{"messages/s (acknowledged)", "messages/s", "%.0f", func(f brokersFigures) float64 { return f.msgPerSec }},
	{"broker 1's connections", "broker connections", "%.0f", func(f brokersFigures) float64 { return f.brokerConns }},
	{"broker heap after GC, KiB per client", "broker heap KiB/client", "%.1f", func(f brokersFigures) float64 { return f.heapKiB }},
	{"broker direct memory, KiB per client", "broker direct KiB/client", "%.1f", func(f brokersFigures) float64 { return f.directKiB }},
	{"broker threads added", "broker threads added", "%.0f", func(f brokersFigures) float64 { return math.Round(f.threads) }},
	{"broker CPU µs per message", "broker CPU us/message", "%.0f", func(f brokersFigures) float64 { return f.brokerUsPerMsg }},
	{"broker CPU ms per client-minute", "broker CPU ms/client-min", "%.2f", func(f brokersFigures) float64 { return f.brokerMsPerClientMin }},
	{"proxy RSS, KiB per client", "proxy RSS KiB/client", "%.1f", func(f brokersFigures) float64 { return f.proxyRSSKiB }},
	{"proxy CPU µs per message", "proxy CPU us/message", "%.0f", func(f brokersFigures) float64 { return f.proxyUsPerMsg }},
	{"broker + proxy CPU µs per message", "both CPU us/message", "%.0f", func(f brokersFigures) float64 { return f.brokerUsPerMsg + f.proxyUsPerMsg }},
}

func renderBrokers(res *brokersResults) string {
	var b strings.Builder
	c := res.Config
	fmt.Fprintf(&b, "# The brokers' side of multiplexing\n\n")
	fmt.Fprintf(&b, "%s, %d CPUs, %s. %d producer clients (the descriptor limit %d allows %d with two descriptors a client), "+
		"%d topics on broker 1, %.0f messages/s of %s in all; %d round(s) of %.0f s after %.0f s of sending, medians. %s\n\n",
		res.Date, res.Machine.CPUs, res.Machine.CPUModel, c.Clients, c.DescriptorLimit, (c.DescriptorLimit-descriptorReserve)/2,
		c.Topics, c.Rate, sizeLabel(c.Size), c.Rounds, c.MeasureSec, c.SettleSec, c.Note)
	b.WriteString("Per client: the growth from the sample before the clients connected to the one after the measured window " +
		"(the clients still connected), divided by the clients. Heap after a full GC (`jcmd GC.run`). Ratio: multiplexed over framed.\n\n")
	fmt.Fprintf(&b, "| figure | %s | %s | ratio |\n|---|--:|--:|--:|\n", pathPulsarProxyFramed, pathPulsarProxyMultiplex)
	fr, mx := brokersMedian(res.Runs, pathPulsarProxyFramed), brokersMedian(res.Runs, pathPulsarProxyMultiplex)
	for _, row := range brokersRows {
		a, m := row.get(fr), row.get(mx)
		ratio := "—"
		if a > 0 {
			ratio = fmt.Sprintf("%.2f", m/a)
		}
		fmt.Fprintf(&b, "| %s | "+row.format+" | "+row.format+" | %s |\n", row.name, a, m, ratio)
	}
	return b.String()
}

// brokersChart draws one panel per figure, framed and multiplexed side by side.
func brokersChart(res *brokersResults, w *bytes.Buffer) error {
	fr, mx := brokersMedian(res.Runs, pathPulsarProxyFramed), brokersMedian(res.Runs, pathPulsarProxyMultiplex)
	rows := brokersRows[1:]
	cols := (len(rows) + 1) / 2
	const pw, ph, margin = 230, 260, 20
	img := image.NewRGBA(image.Rect(0, 0, pw*cols+margin, 2*ph+110))
	draw.Draw(img, img.Bounds(), &image.Uniform{chartBG}, image.Point{}, draw.Src)
	text(img, margin, 18, fmt.Sprintf("the brokers' side of multiplexing, %d clients, %s, %d CPUs", res.Config.Clients, res.Date[:10], res.Machine.CPUs))
	for i, row := range rows {
		x0, y0 := margin+(i%cols)*pw, 40+(i/cols)*ph
		drawPanel(img, x0, y0, pw-margin, ph-20, panel{title: row.chart, values: []float64{row.get(fr), row.get(mx)}, format: row.format})
	}
	for i, name := range brokersPaths {
		x := margin + i*200
		fill(img, image.Rect(x, 2*ph+60, x+14, 2*ph+74), chartColors[i])
		text(img, x+20, 2*ph+72, name)
	}
	return png.Encode(w, img)
}

func writeBrokersResults(res *brokersResults, dir string) error {
	sort.SliceStable(res.Runs, func(i, j int) bool { return res.Runs[i].Round < res.Runs[j].Round })
	if err := writeJSON(dir, "brokers", res); err != nil {
		return err
	}
	return renderBrokersFiles(res, dir)
}

func renderBrokersFiles(res *brokersResults, dir string) error {
	if err := writeMarkdown(dir, "brokers", renderBrokers(res)); err != nil {
		return err
	}
	var img bytes.Buffer
	if err := brokersChart(res, &img); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "brokers.png"), img.Bytes(), 0o644)
}

// rerenderBrokers writes brokers.md and brokers.png anew from brokers.json.
func rerenderBrokers(dir string) error {
	var res brokersResults
	if err := readJSON(dir, "brokers", &res); err != nil {
		return err
	}
	return renderBrokersFiles(&res, dir)
}
