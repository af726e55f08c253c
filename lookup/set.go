package lookup

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ErrTargetNotAllowed is returned for a direct-mode target that discovery does not know.
var ErrTargetNotAllowed = errors.New("target broker not allowed")

// ErrNoBroker is returned when discovery knows no broker at all.
var ErrNoBroker = errors.New("no broker available")

// Prober checks that one broker answers. The pool's Ping is the production prober.
type Prober func(ctx context.Context, b Broker) error

// BrokerSet is the process's one view of the live brokers: discovery's list plus the
// result of the last health probe of each. Lookups pick from it and direct-mode targets are
// checked against it, so the two can never disagree.
type BrokerSet struct {
	discovery Discovery
	next      atomic.Uint64

	mu      sync.Mutex
	healthy map[string]bool   // by Addr, last probe result
	reason  map[string]string // by Addr, last probe error
}

// NewBrokerSet builds the live set over a discovery provider.
func NewBrokerSet(d Discovery) *BrokerSet {
	return &BrokerSet{discovery: d, healthy: map[string]bool{}, reason: map[string]string{}}
}

// Allow checks a client's proxy_to_broker_url. Only a host and port that discovery lists
// pass; the host is compared as written, never resolved, so a DNS name cannot smuggle in an
// address discovery did not hand out.
func (s *BrokerSet) Allow(target string) (Broker, error) {
	host, port, err := ParseTarget(target)
	if err != nil {
		return Broker{}, fmt.Errorf("%w: %v", ErrTargetNotAllowed, err)
	}
	for _, b := range s.discovery.Brokers() {
		if b.Host == host && b.Port == port {
			return b, nil
		}
	}
	return Broker{}, fmt.Errorf("%w: %s is not a known broker", ErrTargetNotAllowed, target)
}

// Pick returns the brokers to try for a lookup, healthy ones first, rotated so load spreads.
func (s *BrokerSet) Pick() ([]Broker, error) {
	all := s.discovery.Brokers()
	if len(all) == 0 {
		return nil, ErrNoBroker
	}
	start := int(s.next.Add(1) % uint64(len(all)))
	rotated := append(all[start:len(all):len(all)], all[:start]...)
	s.mu.Lock()
	defer s.mu.Unlock()
	var good, bad []Broker
	for _, b := range rotated {
		if s.healthy[b.Addr()] {
			good = append(good, b)
		} else {
			bad = append(bad, b)
		}
	}
	return append(good, bad...), nil
}

// Ready reports whether at least one broker passed its last probe, with a reason when not.
func (s *BrokerSet) Ready() (bool, string) {
	all := s.discovery.Brokers()
	if len(all) == 0 {
		return false, "discovery lists no broker"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var reasons []string
	for _, b := range all {
		if s.healthy[b.Addr()] {
			return true, ""
		}
		r := s.reason[b.Addr()]
		if r == "" {
			r = "not probed yet"
		}
		reasons = append(reasons, b.URL+": "+r)
	}
	return false, fmt.Sprintf("no broker reachable (%v)", reasons)
}

// ProbeAll probes every known broker once, concurrently, and records the results.
func (s *BrokerSet) ProbeAll(ctx context.Context, probe Prober, timeout time.Duration) {
	var wg sync.WaitGroup
	for _, b := range s.discovery.Brokers() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			err := probe(pctx, b)
			s.mu.Lock()
			defer s.mu.Unlock()
			s.healthy[b.Addr()] = err == nil
			if err != nil {
				s.reason[b.Addr()] = err.Error()
			} else {
				delete(s.reason, b.Addr())
			}
		}()
	}
	wg.Wait()
}

// RunHealthChecks probes all brokers every interval until ctx ends.
func (s *BrokerSet) RunHealthChecks(ctx context.Context, probe Prober, interval, timeout time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		s.ProbeAll(ctx, probe, timeout)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
