// Package discovery finds the brokers: the providers (a static list, Consul, DNS, Pulsar's
// metadata store in ZooKeeper) and their union, which the live set (package brokers) reads.
// A provider that has to ask a registry keeps its last good list through the registry's
// outages and says why it is stale (the discovery_* metrics, /readyz).
package discovery

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/pulsar-proxy/pulsar-proxy/brokers"
)

// Provider is one configured source of brokers. Its Brokers answers from the last good
// result (see brokers.Discovery); Run is what refreshes it.
type Provider interface {
	brokers.Discovery
	// Name is the provider's metric label and log name: static, consul, dns or metadataStore.
	Name() string
	// Run keeps the provider's list current until ctx ends. A failed refresh is retried with
	// backoff and never empties the list (see source). Static returns at once.
	Run(ctx context.Context)
}

// Static is a fixed broker list from configuration.
type Static struct{ list []brokers.Broker }

// NewStatic parses the configured broker URLs.
func NewStatic(urls []string) (*Static, error) { return NewStaticWeb(urls, nil) }

// NewStaticWeb parses the configured broker URLs and, when webURLs is not empty, the web
// service URL of each, in the same order (http(s)://host:port). The operator wrote both, so a
// web URL may name another host than its broker's (a separate Service or ingress for the web
// port is common); brokers.Set still holds it to broker.allowedWebPorts.
func NewStaticWeb(urls, webURLs []string) (*Static, error) {
	if len(urls) == 0 {
		return nil, fmt.Errorf("static discovery needs at least one broker")
	}
	if len(webURLs) != 0 && len(webURLs) != len(urls) {
		return nil, fmt.Errorf("static discovery: %d web service URLs for %d brokers (one each, in the same order)", len(webURLs), len(urls))
	}
	s := &Static{}
	for i, raw := range urls {
		b, err := brokers.ParseURL(raw)
		if err != nil {
			return nil, err
		}
		if len(webURLs) > 0 {
			if b.Web, err = brokers.ParseWebURL(webURLs[i]); err != nil {
				return nil, err
			}
			b.WebByOperator = true
		}
		s.list = append(s.list, b)
	}
	return s, nil
}

// Brokers returns the configured brokers (shared; never modified).
func (s *Static) Brokers() []brokers.Broker { return s.list }

// Name is "static".
func (s *Static) Name() string { return "static" }

// Run has nothing to refresh.
func (s *Static) Run(context.Context) {}

// Union is the live list of several providers at once: every broker any of them lists,
// once (by host:port), in provider order.
type Union []brokers.Discovery

// Brokers merges the providers' lists.
func (u Union) Brokers() []brokers.Broker {
	if len(u) == 1 {
		return u[0].Brokers()
	}
	var out []brokers.Broker
	for _, d := range u {
		for _, b := range d.Brokers() {
			// Lists are a handful of brokers: a scan beats a map.
			if !slices.ContainsFunc(out, func(o brokers.Broker) bool { return o.Host == b.Host && o.Port == b.Port }) {
				out = append(out, b)
			}
		}
	}
	return out
}

// Problem joins what the providers report as wrong, for /readyz when no broker is known.
func (u Union) Problem() string {
	var ps []string
	for _, d := range u {
		if p, ok := d.(brokers.ProblemReporter); ok {
			if msg := p.Problem(); msg != "" {
				ps = append(ps, msg)
			}
		}
	}
	return strings.Join(ps, "; ")
}

// errEmptyAnswer is what a refresh that found no broker at all counts as.
var errEmptyAnswer = errors.New("the answer lists no broker")

// source is the state every refreshing provider shares: the last good list and how fresh it
// is. A failed refresh keeps the last good list and marks it stale. So does an answer with no
// broker at all: a registry restarting empty, or every health check failing at once, is far
// more often a hiccup of the registry than a cluster without brokers, and the old list is
// still the best guess of where the brokers are (their health probes tell the rest).
type source struct {
	name    string
	log     zerolog.Logger
	metrics *Metrics
	now     func() time.Time

	mu      sync.Mutex
	list    []brokers.Broker
	started time.Time
	lastOK  time.Time // zero until the first success
	err     error     // of the last refresh; nil after a success
}

func newSource(name string, log zerolog.Logger, m *Metrics) *source {
	s := &source{name: name, log: log.With().Str("discovery", name).Logger(), metrics: m, now: time.Now}
	s.started = s.now()
	m.addSource(s)
	return s
}

// Brokers returns the last good list (shared: succeed replaces it, never modifies it).
func (s *source) Brokers() []brokers.Broker {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.list
}

// Name is the provider's label.
func (s *source) Name() string { return s.name }

// Problem says why the list is stale, or "" (brokers.ProblemReporter).
func (s *source) Problem() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		if s.lastOK.IsZero() {
			return s.name + ": no answer yet"
		}
		return ""
	}
	return s.name + ": " + s.err.Error()
}

// staleness is how long the list has not been known to be current: zero while the last
// refresh succeeded (the list is as current as the provider can tell), else the time since
// the last success (since start before the first).
func (s *source) staleness() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.lastOK.IsZero():
		return s.now().Sub(s.started)
	case s.err == nil:
		return 0
	}
	return s.now().Sub(s.lastOK)
}

func (s *source) lastSuccess() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastOK
}

// confirm records that the list is still current without a new answer: a watch (Consul's
// blocking query) that was open until now.
func (s *source) confirm() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil && !s.lastOK.IsZero() {
		s.lastOK = s.now()
	}
}

func (s *source) isStale() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err != nil || s.lastOK.IsZero()
}

// succeed records a refresh's answer; an empty one counts as a failure.
func (s *source) succeed(bs []brokers.Broker) {
	if len(bs) == 0 {
		s.fail(errEmptyAnswer)
		return
	}
	s.mu.Lock()
	wasErr := s.err
	changed := !slices.EqualFunc(bs, s.list, brokers.SameEndpoints)
	s.list = slices.Clone(bs)
	s.lastOK = s.now()
	s.err = nil
	s.mu.Unlock()
	s.metrics.discoveryBrokers.WithLabelValues(s.name).Set(float64(len(bs)))
	s.metrics.discoveryStale.WithLabelValues(s.name).Set(0)
	if wasErr != nil {
		s.log.Info().Int("brokers", len(bs)).Msg("discovery recovered")
	}
	if changed {
		urls := make([]string, len(bs))
		for i, b := range bs {
			urls[i] = b.URL
		}
		s.log.Info().Strs("brokers", urls).Msg("discovery: broker list changed")
	}
}

// fail records a failed refresh: the last good list stays, marked stale.
func (s *source) fail(err error) {
	s.mu.Lock()
	first := s.err == nil
	s.err = err
	kept := len(s.list)
	s.mu.Unlock()
	s.metrics.discoveryErrors.WithLabelValues(s.name).Inc()
	s.metrics.discoveryStale.WithLabelValues(s.name).Set(1)
	ev := s.log.Debug()
	if first {
		ev = s.log.Warn()
	}
	ev.Err(err).Int("kept_brokers", kept).Msg("discovery refresh failed; keeping the last known brokers (stale) and retrying")
}

// backoff is a capped exponential delay with jitter, so many proxies that lost their
// registry at once do not come back to it in lockstep.
type backoff struct {
	min, max, cur time.Duration
}

func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else {
		b.cur = min(b.cur*2, b.max)
	}
	half := b.cur / 2
	return half + rand.N(half+1)
}

func (b *backoff) reset() { b.cur = 0 }

// sleep waits d or until ctx ends; it reports whether ctx is still alive.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
