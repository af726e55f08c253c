// Package metrics reads pulsar-proxy's /metrics for the end-to-end tests and the demo, so that
// a check cannot pass on a metric that is not there: a renamed metric or label must fail the
// check that reads it, not read as 0.
//
// Two ways to read a value:
//   - Value: the series must be in the scrape. For gauges, unlabelled counters, and labelled
//     counters the test has already seen incremented.
//   - Count: for a labelled counter (a CounterVec) whose series only appears once it is first
//     incremented: a series not there yet reads 0. The metric itself must exist: its family
//     in the scrape (`# TYPE name counter`), or, when no series of it has been made yet (a
//     CounterVec with no child exports nothing), among the metrics the product's packages
//     define (Defined); and every label asked for must be one of its label names.
package metrics

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Sample is one line of the exposition.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Scrape is one parsed exposition.
type Scrape struct {
	Samples []Sample
	Types   map[string]string // family name → counter, gauge, histogram, ... (from # TYPE)
}

// Fetch GETs url (the proxy's http://host:port/metrics) and parses it. The time-out is
// generous: on this shared two-core machine a fuzz campaign or another rig next to the
// tests has held a scrape of the local proxy past 5 s.
func Fetch(url string) (*Scrape, error) {
	c := http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	return Parse(string(b))
}

// Parse reads the Prometheus text format (version 0.0.4).
func Parse(text string) (*Scrape, error) {
	s := &Scrape{Types: map[string]string{}}
	for n, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if strings.HasPrefix(line, "#") {
			if f := strings.Fields(line); len(f) == 4 && f[1] == "TYPE" {
				s.Types[f[2]] = f[3]
			}
			continue
		}
		sample, err := parseSample(line)
		if err != nil {
			return nil, fmt.Errorf("line %d %q: %v", n+1, line, err)
		}
		s.Samples = append(s.Samples, sample)
	}
	return s, nil
}

func parseSample(line string) (Sample, error) {
	sm := Sample{Labels: map[string]string{}}
	i := strings.IndexAny(line, "{ ")
	if i <= 0 {
		return sm, fmt.Errorf("no value")
	}
	sm.Name, line = line[:i], line[i:]
	if line[0] == '{' {
		line = line[1:]
		for {
			line = strings.TrimLeft(line, " ,")
			if strings.HasPrefix(line, "}") {
				line = line[1:]
				break
			}
			eq := strings.IndexByte(line, '=')
			if eq <= 0 || len(line) < eq+2 || line[eq+1] != '"' {
				return sm, fmt.Errorf("bad label")
			}
			name := strings.TrimSpace(line[:eq])
			value, rest, err := unquote(line[eq+1:])
			if err != nil {
				return sm, err
			}
			sm.Labels[name], line = value, rest
		}
	}
	f := strings.Fields(line)
	if len(f) == 0 {
		return sm, fmt.Errorf("no value")
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return sm, err
	}
	sm.Value = v
	return sm, nil
}

// unquote reads a double-quoted label value with the format's escapes (\\, \", \n) from the
// start of s and returns it and what follows.
func unquote(s string) (value, rest string, err error) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			return b.String(), s[i+1:], nil
		case '\\':
			if i+1 == len(s) {
				return "", "", fmt.Errorf("unterminated label value")
			}
			i++
			switch s[i] {
			case 'n':
				b.WriteByte('\n')
			default:
				b.WriteByte(s[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", "", fmt.Errorf("unterminated label value")
}

// matcher is a label pair asked for, written as in the exposition: name="value".
type matcher struct{ name, value string }

func parseMatchers(labels []string) ([]matcher, error) {
	var out []matcher
	for _, l := range labels {
		name, quoted, ok := strings.Cut(l, "=")
		if !ok {
			return nil, fmt.Errorf("label %q: want name=\"value\"", l)
		}
		value, err := strconv.Unquote(quoted)
		if err != nil {
			return nil, fmt.Errorf("label %q: want name=\"value\": %v", l, err)
		}
		out = append(out, matcher{strings.TrimSpace(name), value})
	}
	return out, nil
}

// sum adds the samples named name whose labels include every matcher; n is how many matched.
func (s *Scrape) sum(name string, ms []matcher) (total float64, n int) {
samples:
	for _, sm := range s.Samples {
		if sm.Name != name {
			continue
		}
		for _, m := range ms {
			if v, ok := sm.Labels[m.name]; !ok || v != m.value {
				continue samples
			}
		}
		total += sm.Value
		n++
	}
	return total, n
}

// Value sums the samples of name whose labels include every given pair (e.g.
// `direction="client_to_broker"`; other labels are summed over). At least one sample must
// match: a metric or series that is not in the scrape is an error that says what is there.
func (s *Scrape) Value(name string, labels ...string) (float64, error) {
	ms, err := parseMatchers(labels)
	if err != nil {
		return 0, err
	}
	v, n := s.sum(name, ms)
	if n > 0 {
		return v, nil
	}
	var present []string
	for _, sm := range s.Samples {
		if sm.Name == name {
			present = append(present, labelString(sm.Labels))
		}
	}
	if len(present) == 0 {
		return 0, fmt.Errorf("no metric %s in the scrape%s", name, definedHint(name))
	}
	return 0, fmt.Errorf("no series of %s with %s; the scrape has %s", name, strings.Join(labels, ","), strings.Join(present, " "))
}

// Count is Value for a counter whose labelled series appear when first incremented: a series
// not there yet reads 0. The counter must exist (in the scrape as a counter, or among the
// metrics the product defines) and have every label name asked for; otherwise an error.
func (s *Scrape) Count(name string, labels ...string) (float64, error) {
	ms, err := parseMatchers(labels)
	if err != nil {
		return 0, err
	}
	if typ, ok := s.Types[name]; ok {
		if typ != "counter" {
			return 0, fmt.Errorf("%s is a %s, not a counter; read it with Value", name, typ)
		}
	} else if !strings.HasSuffix(name, "_total") {
		return 0, fmt.Errorf("%s is not in the scrape and not named as a counter (_total); read it with Value", name)
	}
	labelNames, defined := Defined(name)
	if !defined {
		if _, ok := s.Types[name]; !ok {
			return 0, fmt.Errorf("no metric %s: not in the scrape, and the proxy's packages define no such metric", name)
		}
		labelNames = s.labelNames(name)
	}
	for _, m := range ms {
		if !slices.Contains(labelNames, m.name) {
			return 0, fmt.Errorf("%s has no label %q (its labels: %s)", name, m.name, strings.Join(labelNames, ", "))
		}
	}
	v, _ := s.sum(name, ms)
	return v, nil
}

func (s *Scrape) labelNames(name string) []string {
	var out []string
	for _, sm := range s.Samples {
		if sm.Name == name {
			for k := range sm.Labels {
				if !slices.Contains(out, k) {
					out = append(out, k)
				}
			}
		}
	}
	return out
}

func definedHint(name string) string {
	if _, ok := Defined(name); ok {
		return " (the proxy defines it, but has exported no series of it yet)"
	}
	return " (and the proxy's packages define no such metric)"
}

func labelString(l map[string]string) string {
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%q", k, l[k]))
	}
	return "{" + strings.Join(parts, ",") + "}"
}
