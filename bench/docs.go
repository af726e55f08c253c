//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The operator's pages show the benchmarks' figures, rendered from the committed results
// (latest.json, proxy-bound.json), never pasted: docs/performance.md each benchmark's summary,
// README.md one paragraph of headline figures, each between a pair of markers. A run (or
// -rerender) writes them; the tests fail when a page and the results disagree.
const (
	performancePage = "docs/performance.md"
	readmePage      = "README.md"

	sideBySideBegin = "<!-- bench:begin (written by go run ./bench) -->"
	sideBySideEnd   = "<!-- bench:end -->"
	proxyBoundBegin = "<!-- bench-proxy:begin (written by go run ./bench -proxy-bound) -->"
	proxyBoundEnd   = "<!-- bench-proxy:end -->"
	headlineBegin   = "<!-- bench-headline:begin (written by go run ./bench) -->"
	headlineEnd     = "<!-- bench-headline:end -->"
)

// docBlock is the text a page shows between two markers.
type docBlock struct{ page, begin, end, text string }

// docBlocks are the blocks the pages show of the results in dir: both benchmarks' JSON
// rendered as the report renders them.
func docBlocks(dir string) ([]docBlock, error) {
	lr, err := loadResults(dir)
	if err != nil {
		return nil, err
	}
	pr, err := loadProxyResults(dir)
	if err != nil {
		return nil, err
	}
	summary, _ := proxyMarkdown(pr)
	return []docBlock{
		{performancePage, sideBySideBegin, sideBySideEnd, markdown(lr)},
		{performancePage, proxyBoundBegin, proxyBoundEnd, summary},
		{readmePage, headlineBegin, headlineEnd, headline(lr, pr)},
	}, nil
}

// updateDocs writes the blocks of the results in dir into the pages of the checkout at root.
func updateDocs(root, dir string) error {
	blocks, err := docBlocks(dir)
	if err != nil {
		return fmt.Errorf("the pages need both benchmarks' results in %s (-docs=false for a development run): %w", dir, err)
	}
	for _, b := range blocks {
		if err := replaceBetween(filepath.Join(root, filepath.FromSlash(b.page)), b.begin, b.end, b.text); err != nil {
			return err
		}
	}
	return nil
}

// loadResults reads dir's latest.json.
func loadResults(dir string) (*results, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "latest.json"))
	if err != nil {
		return nil, err
	}
	var r results
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("latest.json: %w", err)
	}
	return &r, nil
}

// loadProxyResults reads dir's proxy-bound.json, its cells and goals computed from the
// recorded runs (as a run and -rerender write them).
func loadProxyResults(dir string) (*proxyResults, error) {
	raw, err := os.ReadFile(filepath.Join(dir, proxyResultsName+".json"))
	if err != nil {
		return nil, err
	}
	var r proxyResults
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("%s.json: %w", proxyResultsName, err)
	}
	summarizeProxy(&r)
	r.Goals = proxyGoals(&r)
	return &r, nil
}

// rerenderResults writes dir's side-by-side files anew from its latest.json.
func rerenderResults(dir string) error {
	r, err := loadResults(dir)
	if err != nil {
		return err
	}
	return writeResults(r, dir)
}

// headline is the README's paragraph of figures: pulsar-proxy's CPU per GB beside Apache's
// proxy's where the proxy is the bottleneck (batched 1 KiB messages, the summary's connection
// count), its memory per idle connection, and both proxies' peak RSS beside a real broker.
func headline(lr *results, pr *proxyResults) string {
	n := pr.Config.HeadlineConns
	cpu := func(path, role string) string {
		if c := pr.cell(path, role, n, batched1KiB); c != nil && c.CPUSecondsPerGB != nil {
			return fmtCPU(*c.CPUSecondsPerGB)
		}
		return "—"
	}
	rss := func(path string) string {
		if s := lr.summary(path); s != nil {
			return opt(s.PeakRSSMiB, "%.0f")
		}
		return "—"
	}
	return fmt.Sprintf("In the [committed benchmarks](%s) (%d CPUs; %s and %s), with %d producer connections "+
		"of batched 1 KiB messages pulsar-proxy used %s CPU-seconds per GB and Apache's proxy %s (%d consumer "+
		"connections: %s and %s); an idle lookup connection holds %s KiB of pulsar-proxy's RSS, an idle direct "+
		"session %s KiB; and beside a real broker pulsar-proxy peaked at %s MiB of RSS, Apache's proxy at %s MiB.\n",
		performancePage, pr.Machine.CPUs, pr.Date[:10], lr.Date[:10], n,
		cpu(pathPulsarProxy, roleProducer), cpu(pathJavaProxy, roleProducer), n,
		cpu(pathPulsarProxy, roleConsumer), cpu(pathJavaProxy, roleConsumer),
		idleKiB(pr.Idle, "lookup"), idleKiB(pr.Idle, "direct"), rss(pathPulsarProxy), rss(pathJavaProxy))
}

// idleKiB is the RSS growth per idle connection of a mode, at 1,000 connections where
// measured, else at the first count measured.
func idleKiB(rows []idleRow, mode string) string {
	found := "—"
	for _, row := range rows {
		if row.Mode != mode || row.RSSKiB == nil {
			continue
		}
		if row.Conns == 1000 {
			return fmt.Sprintf("%.1f", *row.RSSKiB)
		}
		if found == "—" {
			found = fmt.Sprintf("%.1f", *row.RSSKiB)
		}
	}
	return found
}

// replaceBetween replaces what the file holds between the lines begin and end with text.
func replaceBetween(file, begin, end, text string) error {
	raw, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	s := string(raw)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		return fmt.Errorf("%s: no %q ... %q markers", file, begin, end)
	}
	s = s[:i+len(begin)] + "\n" + text + s[j:]
	return os.WriteFile(file, []byte(s), 0o644)
}

// between is what s holds between the lines begin and end, as replaceBetween writes it.
func between(s, begin, end string) (string, bool) {
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i+len(begin)+1 {
		return "", false
	}
	return s[i+len(begin)+1 : j], true
}
