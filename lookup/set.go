package lookup

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/pulsar-proxy/pulsar-proxy/lookup/brokerhost"
)

// ErrTargetNotAllowed is returned for a direct-mode target that discovery does not know.
var ErrTargetNotAllowed = errors.New("target broker not allowed")

// errNoBroker is returned when discovery knows no broker at all.
var errNoBroker = errors.New("no broker available")

// Prober checks that the broker at addr (host:port) answers. The pool's Ping is the
// production prober.
type Prober func(ctx context.Context, addr string) error

// maxLearned bounds the learned-target table. Entries come only from brokers' lookup answers
// (a handful of broker URLs), so the bound is never reached in a sane cluster.
const maxLearned = 1024

// SetOptions are the target rules of a BrokerSet.
type SetOptions struct {
	// AllowedPorts are the only ports a broker may be on, for discovery's brokers and for
	// direct-mode targets alike. Empty allows every port (tests only; the config default is
	// 6650 and 6651).
	AllowedPorts []string
	// AllowedHosts are host patterns matched label by label (see brokerhost.Match): a target
	// whose host has as many labels as a pattern, each matching the pattern's, is allowed on
	// an allowed port even if discovery does not list it. A '*' stays within its label, so
	// "*.broker.pulsar.svc.cluster.local" allows "broker-0.broker.pulsar.svc.cluster.local"
	// but not "a.broker-0.broker.pulsar.svc.cluster.local", and "pulsar-broker-*" does not
	// allow "pulsar-broker-1.evil.example". Config validates them (brokerhost.CheckPattern).
	// Empty by default.
	AllowedHosts []string
	// LearnedTTL is how long a broker URL named in a lookup answer stays a valid target.
	// Zero disables learning.
	LearnedTTL time.Duration
	Logger     zerolog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// BrokerSet is the process's one view of the live brokers: discovery's list (restricted to
// allowed ports) plus the result of the last health probe of each. Lookups pick from it and
// direct-mode targets are checked against it, so the two can never disagree.
//
// The target rule (Allow), in order:
//  1. the target's port must be in AllowedPorts;
//  2. a host:port that discovery lists now is allowed;
//  3. a host:port that a broker named as topic owner or redirect in a LOOKUP answer (see
//     Learn) is allowed for LearnedTTL after the last such answer, unless discovery listed it
//     and then dropped it less than LearnedTTL ago (discovery's word that it is gone wins);
//  4. a host matching an AllowedHosts pattern label by label is allowed.
//
// Hosts are compared as written, never resolved, so a DNS name cannot smuggle in an address
// that neither discovery nor a broker handed out; a target must be a DNS name or an IP
// literal on a plain decimal port (ParseTarget) before any rule is applied.
type BrokerSet struct {
	discovery Discovery
	opts      SetOptions
	next      atomic.Uint64
	nextWeb   atomic.Uint64 // round robin of WebURLs

	mu       sync.Mutex
	healthy  map[hostPort]bool    // last probe result
	reason   map[hostPort]string  // last probe error
	lastIn   []Broker             // discovery's list as last seen (shared, not modified)
	lastLive []Broker             // lastIn restricted to allowed ports (shared, not modified)
	last     []Broker             // lastLive sorted by Addr, to tell what changed
	learned  map[string]time.Time // by Addr: allowed until
	dropped  map[string]time.Time // by Addr: left discovery at
	refused  map[string]bool      // by Addr: discovered on a port that is not allowed (warned once)
	changeCh chan struct{}        // closed and replaced when discovery's list changes
}

// hostPort identifies a broker endpoint without building the "host:port" string.
type hostPort struct{ host, port string }

func (b Broker) key() hostPort { return hostPort{b.Host, b.Port} }

// NewBrokerSet builds the live set over a discovery provider.
func NewBrokerSet(d Discovery, opts SetOptions) *BrokerSet {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &BrokerSet{
		discovery: d, opts: opts,
		healthy: map[hostPort]bool{}, reason: map[hostPort]string{},
		learned: map[string]time.Time{}, dropped: map[string]time.Time{}, refused: map[string]bool{},
		changeCh: make(chan struct{}),
	}
}

// Brokers returns the live set: discovery's brokers on allowed ports.
func (s *BrokerSet) Brokers() []Broker { return slices.Clone(s.live()) }

// live is Brokers without the copy; callers must not modify the result.
func (s *BrokerSet) live() []Broker {
	all := s.discovery.Brokers()
	s.mu.Lock()
	defer s.mu.Unlock()
	// The common case: nothing changed since the last look.
	if s.lastIn != nil && slices.EqualFunc(all, s.lastIn, sameEndpoints) {
		return s.lastLive
	}
	live := s.observeLocked(all)
	s.lastIn, s.lastLive = all, live
	return live
}

// observeLocked filters discovery's list by port and records what left it.
func (s *BrokerSet) observeLocked(all []Broker) []Broker {
	live := make([]Broker, 0, len(all))
	for _, b := range all {
		if !s.portAllowed(b.Port) {
			if !s.refused[b.Addr()] && len(s.refused) < maxLearned {
				s.refused[b.Addr()] = true
				s.opts.Logger.Warn().Str("broker", b.URL).Strs("allowed_ports", s.opts.AllowedPorts).
					Msg("discovery lists a broker on a port that broker.allowedPorts does not allow; ignoring it")
			}
			continue
		}
		live = append(live, b)
	}
	sorted := slices.Clone(live)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Addr() < sorted[j].Addr() })
	if !slices.EqualFunc(sorted, s.last, func(a, b Broker) bool { return a.Addr() == b.Addr() }) {
		now := s.opts.Now()
		for _, old := range s.last {
			if !slices.ContainsFunc(sorted, func(b Broker) bool { return b.Addr() == old.Addr() }) {
				s.dropped[old.Addr()] = now
				delete(s.learned, old.Addr())
				s.opts.Logger.Info().Str("broker", old.URL).Msg("broker left the live set")
			}
		}
		for _, b := range sorted {
			if !slices.ContainsFunc(s.last, func(o Broker) bool { return o.Addr() == b.Addr() }) {
				delete(s.dropped, b.Addr())
				s.opts.Logger.Info().Str("broker", b.URL).Msg("broker joined the live set")
			}
		}
		for k := range s.healthy {
			if !slices.ContainsFunc(sorted, func(b Broker) bool { return b.key() == k }) {
				delete(s.healthy, k)
				delete(s.reason, k)
			}
		}
		s.last = sorted
		close(s.changeCh)
		s.changeCh = make(chan struct{})
	}
	return live
}

func (s *BrokerSet) portAllowed(port string) bool {
	return len(s.opts.AllowedPorts) == 0 || slices.Contains(s.opts.AllowedPorts, port)
}

// Allow checks a client's proxy_to_broker_url against the target rule (see BrokerSet).
func (s *BrokerSet) Allow(target string) (Broker, error) {
	host, port, err := ParseTarget(target)
	if err != nil {
		return Broker{}, fmt.Errorf("%w: %v", ErrTargetNotAllowed, err)
	}
	if !s.portAllowed(port) {
		return Broker{}, fmt.Errorf("%w: port %s of %s is not an allowed broker port", ErrTargetNotAllowed, port, target)
	}
	for _, b := range s.live() {
		if b.Host == host && b.Port == port {
			return b, nil
		}
	}
	addr := Broker{Host: host, Port: port}.Addr()
	s.mu.Lock()
	until, ok := s.learned[addr]
	if ok && !s.opts.Now().Before(until) {
		delete(s.learned, addr)
		ok = false
	}
	s.mu.Unlock()
	if ok {
		return Broker{URL: "pulsar://" + addr, Host: host, Port: port}, nil
	}
	for _, pat := range s.opts.AllowedHosts {
		if brokerhost.Match(pat, host) {
			return Broker{URL: "pulsar://" + addr, Host: host, Port: port}, nil
		}
	}
	return Broker{}, fmt.Errorf("%w: %s is not a known broker", ErrTargetNotAllowed, target)
}

// learn records a broker URL that a broker the proxy asked named in a LOOKUP answer, so a
// client told to connect there may (see the rule on BrokerSet). Discovery's own brokers and
// URLs on other ports are not recorded.
func (s *BrokerSet) learn(rawURL string) {
	if s.opts.LearnedTTL <= 0 || rawURL == "" {
		return
	}
	b, err := parseBrokerURL(rawURL)
	if err != nil || !s.portAllowed(b.Port) {
		return
	}
	if slices.ContainsFunc(s.live(), func(l Broker) bool { return l.Host == b.Host && l.Port == b.Port }) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.opts.Now()
	if at, ok := s.dropped[b.Addr()]; ok {
		if now.Sub(at) < s.opts.LearnedTTL {
			return
		}
		delete(s.dropped, b.Addr())
	}
	if _, known := s.learned[b.Addr()]; !known && len(s.learned) >= maxLearned {
		for addr, until := range s.learned {
			if !now.Before(until) {
				delete(s.learned, addr)
			}
		}
		if len(s.learned) >= maxLearned {
			return
		}
	}
	s.learned[b.Addr()] = now.Add(s.opts.LearnedTTL)
}

// Changed returns a channel that is closed the next time the live set is seen to change.
func (s *BrokerSet) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changeCh
}

// pick returns the brokers to try for a lookup, healthy ones first, rotated so load spreads
// (round robin within each group).
func (s *BrokerSet) pick() ([]Broker, error) {
	all := s.live()
	if len(all) == 0 {
		return nil, s.noBroker()
	}
	start := int(s.next.Add(1) % uint64(len(all)))
	rotated := append(all[start:len(all):len(all)], all[:start]...)
	s.mu.Lock()
	defer s.mu.Unlock()
	var good, bad []Broker
	for _, b := range rotated {
		if s.healthy[b.key()] {
			good = append(good, b)
		} else {
			bad = append(bad, b)
		}
	}
	return append(good, bad...), nil
}

// problemReporter is a discovery provider that can say why it has no brokers.
type problemReporter interface{ problem() string }

func (s *BrokerSet) noBroker() error {
	if p, ok := s.discovery.(problemReporter); ok {
		if msg := p.problem(); msg != "" {
			return fmt.Errorf("%w: discovery lists no broker (%s)", errNoBroker, msg)
		}
	}
	return fmt.Errorf("%w: discovery lists no broker", errNoBroker)
}

// Ready reports whether at least one broker passed its last probe, with a reason when not.
func (s *BrokerSet) Ready() (bool, string) {
	all := s.live()
	if len(all) == 0 {
		return false, s.noBroker().Error()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var reasons []string
	for _, b := range all {
		if s.healthy[b.key()] {
			return true, ""
		}
		r := s.reason[b.key()]
		if r == "" {
			r = "not probed yet"
		}
		reasons = append(reasons, b.URL+": "+r)
	}
	return false, fmt.Sprintf("no broker reachable (%s)", strings.Join(reasons, "; "))
}

// probeAll probes every live broker once, concurrently, and records the results.
func (s *BrokerSet) probeAll(ctx context.Context, probe Prober, timeout time.Duration) {
	var wg sync.WaitGroup
	for _, b := range s.live() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			err := probe(pctx, b.Addr())
			s.mu.Lock()
			defer s.mu.Unlock()
			if !slices.ContainsFunc(s.last, func(l Broker) bool { return l.key() == b.key() }) {
				return // left the set while being probed
			}
			s.healthy[b.key()] = err == nil
			if err != nil {
				s.reason[b.key()] = err.Error()
			} else {
				delete(s.reason, b.key())
			}
		}()
	}
	wg.Wait()
}

// RunHealthChecks probes all brokers every interval, and at once when the set changes, until
// ctx ends.
func (s *BrokerSet) RunHealthChecks(ctx context.Context, probe Prober, interval, timeout time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		changed := s.Changed()
		s.probeAll(ctx, probe, timeout)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-changed:
		}
	}
}

// RegisterMetrics exports the size of the live set: pulsar_proxy_brokers{state="live"} (in
// discovery, on an allowed port) and {state="healthy"} (answered its last probe).
func (s *BrokerSet) RegisterMetrics(reg prometheus.Registerer) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "pulsar_proxy_brokers", Help: "Brokers in the live set (state=live) and those that answered their last probe (state=healthy).",
		ConstLabels: prometheus.Labels{"state": "live"},
	}, func() float64 { return float64(len(s.live())) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "pulsar_proxy_brokers", Help: "Brokers in the live set (state=live) and those that answered their last probe (state=healthy).",
			ConstLabels: prometheus.Labels{"state": "healthy"},
		}, func() float64 {
			live := s.live()
			s.mu.Lock()
			defer s.mu.Unlock()
			n := 0
			for _, b := range live {
				if s.healthy[b.key()] {
					n++
				}
			}
			return float64(n)
		}))
}

// WebURLs returns the web service URLs (scheme://host:port) of the live brokers whose web
// service discovery knows, for the admin API: those that answered their last health probe
// first, each group rotated so that requests spread (round robin).
func (s *BrokerSet) WebURLs() []string {
	all := s.live()
	if len(all) == 0 {
		return nil
	}
	start := int(s.nextWeb.Add(1) % uint64(len(all)))
	s.mu.Lock()
	defer s.mu.Unlock()
	var good, bad []string
	for i := range all {
		b := all[(start+i)%len(all)]
		switch {
		case b.Web == "":
		case s.healthy[b.key()]:
			good = append(good, b.Web)
		default:
			bad = append(bad, b.Web)
		}
	}
	return append(good, bad...)
}

// AllowWeb applies the target rule to a web service endpoint that a broker named (an admin
// API redirect's Location): scheme is http or https, host and port as in the URL. It is
// allowed when it is the web service of a live broker, or when its host matches an
// AllowedHosts pattern and scheme and port are those of a live broker's web service (a
// pattern never opens a port discovery did not name). Hosts are compared as written, never
// resolved; learned lookup targets do not apply (they are binary endpoints).
func (s *BrokerSet) AllowWeb(scheme, host, port string) bool {
	h, p, err := brokerhost.SplitHostPort(Broker{Host: host, Port: port}.Addr())
	if err != nil {
		return false
	}
	u := WebURL(strings.EqualFold(scheme, "https"), h, p)
	if !strings.EqualFold(scheme, "https") && !strings.EqualFold(scheme, "http") {
		return false
	}
	suffix := ":" + p
	portKnown := false
	for _, b := range s.live() {
		if b.Web == u {
			return true
		}
		if strings.HasPrefix(b.Web, strings.ToLower(scheme)+"://") && strings.HasSuffix(b.Web, suffix) {
			portKnown = true
		}
	}
	if !portKnown {
		return false
	}
	for _, pat := range s.opts.AllowedHosts {
		if brokerhost.Match(pat, h) {
			return true
		}
	}
	return false
}
