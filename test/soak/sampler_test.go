//go:build soak

package soak

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/test/metrics"
)

// sampler scrapes the proxy's /metrics, keeps the samples and appends each to the CSV as it
// comes, so a run cut short still leaves its file.
type sampler struct {
	url   string
	began time.Time
	flows []*flow
	csv   io.Writer
	stop  chan struct{}

	mu      sync.Mutex
	samples []Sample
	errs    []error
}

// every samples now and then every d until stop is closed; the channel closes when it ends.
func (s *sampler) every(d time.Duration) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(d)
		defer tick.Stop()
		for {
			sm, err := s.take()
			s.mu.Lock()
			if err == nil {
				s.samples = append(s.samples, sm)
				err = CSVRow(s.csv, sm)
			}
			if err != nil {
				s.errs = append(s.errs, err)
			}
			s.mu.Unlock()
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return done
}

func (s *sampler) all() ([]Sample, []error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Sample(nil), s.samples...), append([]error(nil), s.errs...)
}

// take scrapes once.
func (s *sampler) take() (Sample, error) {
	sm := Sample{At: time.Since(s.began)}
	sc, err := metrics.Fetch(s.url)
	if err != nil {
		return sm, err
	}
	for _, g := range []struct {
		name string
		into *float64
	}{
		{"process_resident_memory_bytes", &sm.RSS}, {"go_memstats_heap_inuse_bytes", &sm.HeapInuse},
		{"go_memstats_heap_alloc_bytes", &sm.HeapAlloc}, {"go_goroutines", &sm.Goroutines},
		{"process_open_fds", &sm.FDs}, {"pulsar_proxy_sessions_active", &sm.Sessions},
	} {
		if *g.into, err = sc.Value(g.name); err != nil {
			return sm, err
		}
	}
	if sm.SessionsTotal, err = sc.Count("pulsar_proxy_sessions_total"); err != nil {
		return sm, err
	}
	if sm.Refreshes, err = sc.Count("pulsar_proxy_credential_refreshes_total", `result="ok"`); err != nil {
		return sm, err
	}
	for _, f := range s.flows {
		acked, missing := f.missing()
		sm.Acked += float64(acked)
		sm.Received += float64(acked - missing)
	}
	return sm, nil
}

func (s Sample) String() string {
	return fmt.Sprintf("%s: RSS %.1f MiB, heap %.1f MiB, %0.f goroutines, %.0f FDs, %.0f sessions", s.At.Round(time.Second),
		s.RSS/(1<<20), s.HeapInuse/(1<<20), s.Goroutines, s.FDs, s.Sessions)
}
