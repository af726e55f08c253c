package discovery

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/pulsar-proxy/pulsar-proxy/brokers"
)

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func TestUnionMergesAndReportsProblems(t *testing.T) {
	a, err := NewStatic([]string{"pulsar://b0:6650", "pulsar://b1:6650"})
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics(nil)
	src := newSource("consul", zerolog.Nop(), m)
	src.fail(errors.New("connection refused"))
	b, _ := brokers.ParseURL("pulsar://b1:6650")
	u := Union{a, src}
	src.succeed([]brokers.Broker{b})
	if got := u.Brokers(); len(got) != 2 {
		t.Fatalf("union %v, want b0 and b1 once", got)
	}
	src.fail(errors.New("connection refused"))
	if p := u.Problem(); !strings.Contains(p, "consul: connection refused") {
		t.Fatalf("problem %q", p)
	}
	empty := brokers.NewSet(Union{newSource("dns", zerolog.Nop(), m)}, brokers.Options{})
	if ok, reason := empty.Ready(); ok || !strings.Contains(reason, "dns: no answer yet") {
		t.Fatalf("ready=%v reason=%q", ok, reason)
	}
	if _, err := empty.Pick(); !errors.Is(err, brokers.ErrNoBroker) {
		t.Fatalf("Pick on empty set: %v", err)
	}
}

func TestSourceKeepsLastGoodListOnErrorsAndEmptyAnswers(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	clock := &fakeClock{now: time.Unix(1_000_000, 0)}
	src := newSource("consul", zerolog.Nop(), m)
	src.now = clock.Now
	b0, _ := brokers.ParseURL("pulsar://b0:6650")
	src.succeed([]brokers.Broker{b0})
	if src.isStale() || testutil.ToFloat64(m.discoveryStale.WithLabelValues("consul")) != 0 {
		t.Fatal("fresh source reported stale")
	}
	clock.add(time.Hour)
	if s := src.staleness(); s != 0 {
		t.Fatalf("staleness %v while the last refresh succeeded", s)
	}
	src.confirm() // a Consul watch that held until now: the list was current until now
	clock.add(10 * time.Second)
	src.fail(errors.New("consul down"))
	src.succeed(nil) // an empty answer is not believed either
	if got := src.Brokers(); len(got) != 1 || got[0] != b0 {
		t.Fatalf("last good list lost: %v", got)
	}
	if !src.isStale() || testutil.ToFloat64(m.discoveryStale.WithLabelValues("consul")) != 1 {
		t.Fatal("failed source not marked stale")
	}
	if n := testutil.ToFloat64(m.discoveryErrors.WithLabelValues("consul")); n != 2 {
		t.Fatalf("errors = %v, want 2", n)
	}
	clock.add(5 * time.Second)
	if s := src.staleness(); s != 15*time.Second {
		t.Fatalf("staleness %v, want 15s", s)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP pulsar_proxy_discovery_staleness_seconds Seconds a provider's broker list has not been known to be current: 0 while its last refresh succeeded, else the time since the last success (since start before the first).
# TYPE pulsar_proxy_discovery_staleness_seconds gauge
pulsar_proxy_discovery_staleness_seconds{provider="consul"} 15
# HELP pulsar_proxy_discovery_last_success_timestamp_seconds Unix time of a provider's last successful refresh (a Consul watch counts until it breaks); 0 before the first.
# TYPE pulsar_proxy_discovery_last_success_timestamp_seconds gauge
pulsar_proxy_discovery_last_success_timestamp_seconds{provider="consul"} 1.0036e+06
`), "pulsar_proxy_discovery_staleness_seconds", "pulsar_proxy_discovery_last_success_timestamp_seconds"); err != nil {
		t.Fatal(err)
	}
}
