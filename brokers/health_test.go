package brokers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/pulsar-proxy/pulsar-proxy/internal/jsonlog"
)

// syncBuffer is a log written by the probes' goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// lines are the log's lines about the brokers' health (not the live set's changes), each held
// to jsonlog's rules.
func (s *syncBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(s.b.String()), "\n") {
		if l == "" {
			continue
		}
		if err := jsonlog.CheckLine([]byte(l)); err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		var m map[string]any
		json.Unmarshal([]byte(l), &m)
		if !strings.Contains(m["message"].(string), "live set") {
			out = append(out, m)
		}
	}
	return out
}

// A broker's health is told once per change: unreachable with the reason, then reachable
// again with how long it was down; probes that find nothing new say nothing.
func TestBrokerStateChangesAreLoggedOnce(t *testing.T) {
	d := &listDiscovery{}
	d.set(t, "pulsar://b0:6650", "pulsar://b1:6650")
	clock := &fakeClock{now: time.Unix(1000, 0)}
	log := &syncBuffer{}
	set := NewSet(d, Options{Logger: zerolog.New(log), Now: clock.Now})
	var mu sync.Mutex
	down := map[string]error{}
	probe := func(_ context.Context, addr string) error {
		mu.Lock()
		defer mu.Unlock()
		return down[addr]
	}
	setDown := func(addr string, err error) { mu.Lock(); down[addr] = err; mu.Unlock() }

	set.ProbeAll(context.Background(), probe, time.Second) // both up: informational
	setDown("b1:6650", errors.New("dial tcp b1:6650: connect: connection refused"))
	for range 3 {
		set.ProbeAll(context.Background(), probe, time.Second)
		clock.add(10 * time.Second)
	}
	setDown("b1:6650", nil)
	for range 3 {
		set.ProbeAll(context.Background(), probe, time.Second)
	}

	var got []string
	for _, l := range log.lines(t) {
		got = append(got, l["level"].(string)+" "+l["broker"].(string)+" "+l["message"].(string))
	}
	want := []string{
		"info pulsar://b0:6650 broker reachable", "info pulsar://b1:6650 broker reachable",
		"warn pulsar://b1:6650 broker unreachable: its health probe failed; lookups go to the other brokers",
		"warn pulsar://b1:6650 broker reachable again",
	}
	// The first two come from concurrent probes, in either order.
	if len(got) != len(want) || !(got[0] == want[0] && got[1] == want[1] || got[0] == want[1] && got[1] == want[0]) ||
		got[2] != want[2] || got[3] != want[3] {
		t.Fatalf("log:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	lines := log.lines(t)
	if lines[2]["reason"] != "dial tcp b1:6650: connect: connection refused" {
		t.Errorf("unreachable line without its reason: %v", lines[2])
	}
	if lines[3]["unreachable_for_seconds"] != 30.0 || lines[3]["last_error"] != "dial tcp b1:6650: connect: connection refused" {
		t.Errorf("reachable-again line: %v", lines[3])
	}
	if ok, _ := set.Ready(); !ok {
		t.Error("not ready with both brokers up")
	}
}

// A broker that fails its very first probe is reported unreachable at once.
func TestBrokerDownAtStartIsLogged(t *testing.T) {
	d := &listDiscovery{}
	d.set(t, "pulsar://b0:6650")
	log := &syncBuffer{}
	set := NewSet(d, Options{Logger: zerolog.New(log)})
	fail := func(context.Context, string) error { return errors.New("i/o timeout") }
	set.ProbeAll(context.Background(), fail, time.Second)
	set.ProbeAll(context.Background(), fail, time.Second)
	lines := log.lines(t)
	if len(lines) != 1 || lines[0]["level"] != "warn" || lines[0]["first_probe"] != true || lines[0]["reason"] != "i/o timeout" {
		t.Fatalf("log: %v", lines)
	}
}
