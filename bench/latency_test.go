//go:build linux

package main

import (
	"os"
	"path/filepath"
	"testing"
)

// The committed paired latency results are well formed: at least five rounds, every path in
// each, and latency.md what the report renders of the JSON.
func TestCommittedLatencyResults(t *testing.T) {
	var r latencyResults
	decodeStrict(t, "results", "latency", &r)
	if r.Rounds < 5 || len(r.Runs) != r.Rounds || r.Rate <= 0 {
		t.Fatalf("latency.json: %d rounds (%d runs) at %.0f msg/s, want at least five paired rounds", r.Rounds, len(r.Runs), r.Rate)
	}
	for _, lr := range r.Runs {
		if len(lr.Paths) != len(latencyPaths) {
			t.Errorf("round %d: %d paths, want %d", lr.Round, len(lr.Paths), len(latencyPaths))
		}
	}
	md, err := os.ReadFile(filepath.Join("results", "latency.md"))
	if err != nil {
		t.Fatal(err)
	}
	if string(md) != renderLatency(&r) {
		t.Error("latency.md is not what the report renders of latency.json (bin/bench -proxy-bound -latency -rerender)")
	}
}
