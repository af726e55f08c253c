package promcheck

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"time"
)

// Scrape is one /metrics body taken at a time.
type Scrape struct {
	Time time.Time `json:"time"`
	Text string    `json:"metrics"`
}

// ReadRecording reads a recording: one JSON Scrape per line, as test/e2e writes it.
func ReadRecording(path string) ([]Scrape, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Scrape
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for n := 1; sc.Scan(); n++ {
		var s Scrape
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no scrape", path)
	}
	return out, nil
}

// ExportedBy merges what every scrape of a recording exported.
func ExportedBy(scrapes []Scrape) (Exported, error) {
	all := Exported{}
	for i, s := range scrapes {
		e, err := ParseScrape(strings.NewReader(s.Text))
		if err != nil {
			return nil, fmt.Errorf("scrape %d: %w", i+1, err)
		}
		all.Merge(e)
	}
	return all, nil
}

// Unused lists the exported metrics with prefix that no query selects (histograms by their
// family name), sorted.
func Unused(queries []Query, e Exported, prefix string) []string {
	used := map[string]bool{}
	for _, q := range queries {
		for _, name := range Selected(q.Expr) {
			used[name] = true
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if base, ok := strings.CutSuffix(name, suffix); ok {
					used[base] = true
				}
			}
		}
	}
	var out []string
	for name := range e {
		base := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(name, suffix); ok && e[b+"_bucket"] != nil {
				base = b
			}
		}
		if strings.HasPrefix(name, prefix) && !used[name] && !used[base] && !slices.Contains(out, base) {
			out = append(out, base)
		}
	}
	sort.Strings(out)
	return out
}
