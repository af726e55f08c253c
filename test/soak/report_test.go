package soak

import (
	"bytes"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSlope(t *testing.T) {
	xs := []float64{0, 1, 2, 3}
	if got := Slope(xs, []float64{5, 7, 9, 11}); got != 2 {
		t.Fatalf("slope of a line of slope 2: %v", got)
	}
	if got := Slope(xs, []float64{4, 4, 4, 4}); got != 0 {
		t.Fatalf("slope of a flat line: %v", got)
	}
	if got := Slope(xs, []float64{1, 3, 1, 3}); math.Abs(got-0.4) > 1e-9 {
		t.Fatalf("slope of a zigzag: %v, want 0.4", got)
	}
	if got := Slope([]float64{1}, []float64{1}); got != 0 {
		t.Fatalf("slope of one point: %v", got)
	}
}

// Trends fits only the window after warm-up: a climb during warm-up, flat after, is flat.
func TestTrendsLeaveOutWarmUp(t *testing.T) {
	var samples []Sample
	for i := range 20 {
		s := Sample{At: time.Duration(i) * time.Minute, RSS: 100 << 20, Goroutines: 50}
		if i < 10 {
			s.RSS = float64(i*10) * (1 << 20)
			s.Goroutines = float64(i)
		}
		samples = append(samples, s)
	}
	for _, tr := range Trends(samples, 10*time.Minute) {
		if tr.PerHour != 0 {
			t.Errorf("%s: slope %v after warm-up, want 0", tr.Name, tr.PerHour)
		}
		if tr.Name == "RSS" && (tr.Start != 0 || tr.End != 100<<20 || tr.Mean != 100<<20) {
			t.Errorf("RSS trend %+v", tr)
		}
	}
	// A steady climb of 1 goroutine a minute is 60 an hour.
	for i := range samples {
		samples[i].Goroutines = float64(i)
	}
	if g := Trends(samples, 0)[2]; g.Name != "goroutines" || math.Abs(g.PerHour-60) > 1e-6 {
		t.Errorf("goroutines climbing 1/min: %+v", g)
	}
	var out bytes.Buffer
	if err := Plot(&out, "test", samples, Trends(samples, 10*time.Minute), 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(&out); err != nil {
		t.Fatalf("the chart is not a PNG: %v", err)
	}
	md := Markdown(Run{Duration: 20 * time.Minute, Trends: Trends(samples, 10*time.Minute)})
	if !strings.Contains(md, "| goroutines |") || !strings.Contains(md, "+60.0 /h") {
		t.Errorf("summary lacks the goroutines' slope:\n%s", md)
	}
}

// The page shows the summary without its title, between the markers, and UpdatePage leaves
// what is around them.
func TestUpdatePage(t *testing.T) {
	page := filepath.Join(t.TempDir(), "reliability.md")
	if err := os.WriteFile(page, []byte("# Reliability\n\n"+PageBegin+"\nold\n"+PageEnd+"\n\nAfter.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	summary := "# Soak: 30m0s\n\nrun facts\n\n| resource |\n"
	if err := UpdatePage(page, summary); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	want := "# Reliability\n\n" + PageBegin + "\nrun facts\n\n| resource |\n" + PageEnd + "\n\nAfter.\n"
	if string(raw) != want {
		t.Errorf("page:\n%s\nwant:\n%s", raw, want)
	}
	if err := os.WriteFile(page, []byte("no markers\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := UpdatePage(page, summary); err == nil {
		t.Error("no error for a page without the markers")
	}
}
