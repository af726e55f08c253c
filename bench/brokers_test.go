//go:build linux

package main

import (
	"os"
	"path/filepath"
	"testing"
)

// The committed brokers' side results are well formed: both paths measured in every round,
// samples taken, and brokers.md what the report renders of the JSON.
func TestCommittedBrokersResults(t *testing.T) {
	checkBrokersDir(t, "results")
}

func checkBrokersDir(t *testing.T, dir string) {
	t.Helper()
	var res brokersResults
	decodeStrict(t, dir, "brokers", &res)
	if res.Date == "" || res.Config.Rounds < 1 || res.Config.Clients < 1 {
		t.Fatalf("brokers.json: date or config missing: %+v", res.Config)
	}
	for _, p := range brokersPaths {
		n := 0
		for _, r := range res.Runs {
			if r.Path != p {
				continue
			}
			n++
			if r.Messages <= 0 || r.MeasuredSec <= 0 || r.Loaded.HeapBytes <= 0 || r.Idle.HeapBytes <= 0 || r.Loaded.ProxyRSSKiB <= 0 {
				t.Errorf("%s round %d: a sample or the window is missing: %+v", p, r.Round, r)
			}
		}
		if n != res.Config.Rounds {
			t.Errorf("%s: %d runs, want one a round (%d)", p, n, res.Config.Rounds)
		}
	}
	md, err := os.ReadFile(filepath.Join(dir, "brokers.md"))
	if err != nil {
		t.Fatal(err)
	}
	if string(md) != renderBrokers(&res) {
		t.Error("brokers.md is not what the report renders of brokers.json (bin/bench -brokers -rerender)")
	}
	checkChart(t, dir, "brokers")
}
