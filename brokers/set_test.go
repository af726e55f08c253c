package brokers

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// listDiscovery is a discovery whose list the test changes.
type listDiscovery struct {
	mu sync.Mutex
	bs []Broker
}

func (d *listDiscovery) set(t *testing.T, urls ...string) {
	t.Helper()
	var bs []Broker
	for _, u := range urls {
		b, err := ParseURL(u)
		if err != nil {
			t.Fatal(err)
		}
		bs = append(bs, b)
	}
	d.mu.Lock()
	d.bs = bs
	d.mu.Unlock()
}

func (d *listDiscovery) Brokers() []Broker {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Broker(nil), d.bs...)
}

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

func allowed(set *Set, target string) bool {
	_, err := set.Allow(target)
	return err == nil
}

func TestAllowedPortsApplyToDiscoveryAndTargets(t *testing.T) {
	d := &listDiscovery{}
	d.set(t, "pulsar://b0:6650", "pulsar://b1:22", "pulsar://b2:6651")
	set := NewSet(d, Options{AllowedPorts: []string{"6650", "6651"}, Logger: zerolog.Nop()})
	if got := set.Brokers(); len(got) != 2 || got[0].Addr() != "b0:6650" || got[1].Addr() != "b2:6651" {
		t.Fatalf("live set %v: a broker on port 22 must not be in it", got)
	}
	for target, want := range map[string]bool{"b0:6650": true, "b2:6651": true, "b1:22": false, "b0:6651": false} {
		if allowed(set, target) != want {
			t.Errorf("Allow(%s) = %v, want %v", target, !want, want)
		}
	}
	picked, err := set.Pick()
	if err != nil || len(picked) != 2 {
		t.Fatalf("Pick = %v %v", picked, err)
	}
}

func TestLearnedTargetsExpireAndDiscoveryRemovalWins(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_000_000, 0)}
	d := &listDiscovery{}
	d.set(t, "pulsar://10.0.0.1:6650", "pulsar://10.0.0.2:6650")
	set := NewSet(d, Options{AllowedPorts: []string{"6650"}, LearnedTTL: time.Minute, Now: clock.Now, Logger: zerolog.Nop()})

	// A broker advertises a pod name that discovery lists as an IP.
	if allowed(set, "broker-0.broker.pulsar.svc:6650") {
		t.Fatal("unknown name allowed before any lookup named it")
	}
	set.Learn("pulsar://broker-0.broker.pulsar.svc:6650")
	set.Learn("pulsar://broker-0.broker.pulsar.svc:8080") // port not allowed: never learned
	if !allowed(set, "broker-0.broker.pulsar.svc:6650") {
		t.Fatal("name from a lookup answer not allowed")
	}
	if allowed(set, "broker-0.broker.pulsar.svc:8080") {
		t.Fatal("learned a URL on a port that is not allowed")
	}
	clock.add(59 * time.Second)
	set.Learn("pulsar://broker-0.broker.pulsar.svc:6650") // a new answer renews it
	clock.add(59 * time.Second)
	if !allowed(set, "broker-0.broker.pulsar.svc:6650") {
		t.Fatal("renewed entry expired early")
	}
	clock.add(2 * time.Second)
	if allowed(set, "broker-0.broker.pulsar.svc:6650") {
		t.Fatal("learned entry outlived its TTL")
	}

	// Discovery drops 10.0.0.2: refused at once, and a stale lookup answer naming it does
	// not bring it back within the TTL.
	set.Brokers()
	d.set(t, "pulsar://10.0.0.1:6650")
	if allowed(set, "10.0.0.2:6650") {
		t.Fatal("broker dropped by discovery still allowed")
	}
	set.Learn("pulsar://10.0.0.2:6650")
	if allowed(set, "10.0.0.2:6650") {
		t.Fatal("a lookup answer re-admitted a broker discovery just dropped")
	}
	clock.add(61 * time.Second)
	set.Learn("pulsar://10.0.0.2:6650")
	if !allowed(set, "10.0.0.2:6650") {
		t.Fatal("after the TTL a lookup answer should be trusted again")
	}
	// Discovery brings it back: allowed as a live broker again.
	d.set(t, "pulsar://10.0.0.1:6650", "pulsar://10.0.0.2:6650")
	if !allowed(set, "10.0.0.2:6650") {
		t.Fatal("re-registered broker refused")
	}
}

func TestLearnedTableIsBounded(t *testing.T) {
	d := &listDiscovery{}
	d.set(t, "pulsar://b0:6650")
	set := NewSet(d, Options{LearnedTTL: time.Hour, Logger: zerolog.Nop()})
	for i := range maxLearned + 100 {
		set.Learn(fmt.Sprintf("pulsar://h%d:6650", i))
	}
	set.mu.Lock()
	n := len(set.learned)
	set.mu.Unlock()
	if n > maxLearned {
		t.Fatalf("learned table grew to %d, bound is %d", n, maxLearned)
	}
}

func TestAllowedHostsPatterns(t *testing.T) {
	d := &listDiscovery{}
	d.set(t, "pulsar://b0:6650")
	set := NewSet(d, Options{AllowedPorts: []string{"6650"}, AllowedHosts: []string{"*.broker.pulsar.svc", "pulsar-broker-*", "10.1.0.*"},
		Logger: zerolog.Nop()})
	for target, want := range map[string]bool{
		"broker-7.broker.pulsar.svc:6650":            true,
		"BROKER-7.Broker.Pulsar.svc:6650":            true,
		"broker-7.broker.pulsar.svc:22":              false,
		"evil.example:6650":                          false,
		"a.b.broker.pulsar.svc.evil:6650":            false,
		"a.b.broker.pulsar.svc:6650":                 false, // '*' is one label
		"pulsar-broker-1:6650":                       true,
		"pulsar-broker-1.evil.example:6650":          false, // '*' never crosses a dot
		"pulsar-broker-1.:6650":                      false,
		"pulsar-broker-1/x:6650":                     false,
		"pulsar-broker-1:06650":                      false,
		"pulsar://pulsar-broker-1.evil.example:6650": false,
		"10.1.0.9:6650":                              true,
		"10.1.0.9.evil.example:6650":                 false,
		"[::1]:6650":                                 false,
	} {
		if allowed(set, target) != want {
			t.Errorf("Allow(%s) = %v, want %v", target, !want, want)
		}
	}
}

func TestChangedFiresWhenTheSetChanges(t *testing.T) {
	d := &listDiscovery{}
	d.set(t, "pulsar://b0:6650")
	set := NewSet(d, Options{Logger: zerolog.Nop()})
	set.Brokers()
	ch := set.Changed()
	set.Brokers()
	select {
	case <-ch:
		t.Fatal("Changed fired without a change")
	default:
	}
	d.set(t, "pulsar://b0:6650", "pulsar://b1:6650")
	set.Brokers()
	select {
	case <-ch:
	default:
		t.Fatal("Changed did not fire after a new broker appeared")
	}
}
