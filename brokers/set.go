package brokers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/pulsar-proxy/pulsar-proxy/internal/brokerhost"
	"github.com/pulsar-proxy/pulsar-proxy/internal/jsonlog"
)

// Discovery tells the set which brokers exist right now (the discovery package's providers
// and their union). Brokers must be cheap and must not block: a provider that has to ask
// something (Consul, DNS) answers from its last good result and refreshes that result on its
// own. The returned slice may be shared: callers must not modify it.
type Discovery interface {
	Brokers() []Broker
}

// ProblemReporter is a Discovery that can say why it lists no broker, so that /readyz and a
// lookup's error name the registry's trouble rather than only its effect.
type ProblemReporter interface {
	// Problem says what is wrong with the list, or "" when nothing is.
	Problem() string
}

// ErrTargetNotAllowed is returned for a direct-mode target that discovery does not know.
var ErrTargetNotAllowed = errors.New("target broker not allowed")

// ErrNoBroker is returned by Pick when discovery knows no broker at all.
var ErrNoBroker = errors.New("no broker available")

// Prober checks that the broker at addr (host:port) answers. The Ping of the proxy's control
// connections (upstream.Control) is the production prober.
type Prober func(ctx context.Context, addr string) error

// maxLearned bounds the learned-target table. Entries come only from brokers' lookup answers
// (a handful of broker URLs), so the bound is never reached in a sane cluster.
const maxLearned = 1024

// Options are the target rules of a Set.
type Options struct {
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
	// AllowedWebPorts are the only ports a broker's web service may be on (see the web rule on
	// Set). Unlike AllowedPorts, empty allows none: admin requests carry the proxy's own
	// credentials, so a set built without this option sends them nowhere rather than anywhere.
	AllowedWebPorts []string
	// WebTLS says the brokers' web services are https (broker.tls.enabled); a web URL of the
	// other scheme is refused, so an entry cannot turn the credentials into clear text.
	WebTLS bool
	// SNIServiceNames are the names a TLS client may send as its server name to reach any
	// live broker (the cluster's service URL host, e.g. pulsar.example.com), lower-cased; see
	// AllowSNI.
	SNIServiceNames []string
	// LearnedTTL is how long a broker URL named in a lookup answer stays a valid target.
	// Zero disables learning.
	LearnedTTL time.Duration
	Logger     zerolog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Set is the process's one view of the live brokers: discovery's list (restricted to
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
//
// The web rule: admin requests go to a broker's web service with the proxy's credentials, and
// a registry entry (a znode, a Consul service's meta) names it, so whoever can write the entry
// could otherwise point those credentials anywhere (a cloud metadata address, say). A web URL
// from discovery is used only if it is http(s)://host:port as brokerhost spells it, of the
// scheme WebTLS asks for, on a port in AllowedWebPorts, and on its broker's own host: the Host
// of the same entry's binary URL (or, for an advertised listener's, the host of the
// registration's pulsarServiceUrl). Hosts are compared after brokerhost's canonicalisation
// (lower case, no brackets; a trailing dot and numeric forms such as 127.1 or 2852039166 do
// not parse) and never resolved, so [::ffff:a9fe:a9fe] is not 169.254.169.254. Web URLs the
// operator wrote (static discovery) skip the host rule. A broker whose web URL fails keeps its
// binary endpoint and loses only the admin API, with one warning per broker and reason.
// AllowWeb, for redirects, only ever allows what passed.
type Set struct {
	discovery Discovery
	opts      Options
	next      atomic.Uint64
	nextWeb   atomic.Uint64 // round robin of WebURLs

	mu        sync.Mutex
	healthy   map[hostPort]bool      // last probe result
	reason    map[hostPort]string    // last probe error
	downSince map[hostPort]time.Time // when a broker's probes began to fail
	lastIn    []Broker               // discovery's list as last seen (shared, not modified)
	lastLive  []Broker               // lastIn restricted to allowed ports (shared, not modified)
	last      []Broker               // lastLive sorted by Addr, to tell what changed
	learned   map[string]time.Time   // by Addr: allowed until
	dropped   map[string]time.Time   // by Addr: left discovery at
	refused   map[string]bool        // by Addr: discovered on a port that is not allowed (warned once)
	webBad    map[string]string      // by Addr: why its web URL was refused (warned when it changes)
	changeCh  chan struct{}          // closed and replaced when discovery's list changes
}

// hostPort identifies a broker endpoint without building the "host:port" string.
type hostPort struct{ host, port string }

func (b Broker) key() hostPort { return hostPort{b.Host, b.Port} }

// NewSet builds the live set over a discovery provider.
func NewSet(d Discovery, opts Options) *Set {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Set{
		discovery: d, opts: opts,
		healthy: map[hostPort]bool{}, reason: map[hostPort]string{}, downSince: map[hostPort]time.Time{},
		learned: map[string]time.Time{}, dropped: map[string]time.Time{}, refused: map[string]bool{},
		webBad: map[string]string{}, changeCh: make(chan struct{}),
	}
}

// Brokers returns the live set: discovery's brokers on allowed ports.
func (s *Set) Brokers() []Broker { return slices.Clone(s.live()) }

// live is Brokers without the copy; callers must not modify the result.
func (s *Set) live() []Broker {
	all := s.discovery.Brokers()
	s.mu.Lock()
	defer s.mu.Unlock()
	// The common case: nothing changed since the last look.
	if s.lastIn != nil && slices.EqualFunc(all, s.lastIn, SameEndpoints) {
		return s.lastLive
	}
	live := s.observeLocked(all)
	s.lastIn, s.lastLive = all, live
	return live
}

// observeLocked filters discovery's list by port, applies the web rule, and records what left
// it.
func (s *Set) observeLocked(all []Broker) []Broker {
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
		live = append(live, s.checkWebLocked(b))
	}
	sorted := slices.Clone(live)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Addr() < sorted[j].Addr() })
	if !slices.EqualFunc(sorted, s.last, func(a, b Broker) bool { return a.Addr() == b.Addr() }) {
		now := s.opts.Now()
		for _, old := range s.last {
			if !slices.ContainsFunc(sorted, func(b Broker) bool { return b.Addr() == old.Addr() }) {
				s.dropped[old.Addr()] = now
				delete(s.learned, old.Addr())
				delete(s.webBad, old.Addr())
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
				delete(s.downSince, k)
			}
		}
		s.last = sorted
		close(s.changeCh)
		s.changeCh = make(chan struct{})
	}
	return live
}

func (s *Set) portAllowed(port string) bool {
	return len(s.opts.AllowedPorts) == 0 || slices.Contains(s.opts.AllowedPorts, port)
}

// checkWebLocked applies the web rule (see Set) to a discovered broker and returns it
// with its web URL in WebURL's spelling, or without one. A refusal is warned once per broker
// and reason: this runs when discovery's list changes, never per request.
func (s *Set) checkWebLocked(b Broker) Broker {
	if b.Web == "" {
		return b
	}
	web, why := s.checkWeb(b)
	b.Web = web
	addr := b.Addr()
	if why == "" {
		delete(s.webBad, addr)
		return b
	}
	if old, seen := s.webBad[addr]; old != why && (seen || len(s.webBad) < maxLearned) {
		s.webBad[addr] = why
		s.opts.Logger.Warn().Str("broker", b.URL).Str("reason", why).
			Msg("discovery names a web service URL the proxy will not send admin requests to; the broker serves topics but not the admin API")
	}
	return b
}

// checkWeb is the web rule for one broker: its web URL in WebURL's spelling, or "" and why not.
func (s *Set) checkWeb(b Broker) (web, why string) {
	tls, host, port, err := brokerhost.ParseWebURL(b.Web)
	switch {
	case err != nil:
		return "", fmt.Sprintf("web service URL %s: %v", clip(b.Web), err)
	case tls != s.opts.WebTLS:
		return "", fmt.Sprintf("web service URL %s: want %s, as broker.tls.enabled is %t", clip(b.Web), schemeOf(s.opts.WebTLS), s.opts.WebTLS)
	case !b.WebByOperator && host != b.Host && host != b.WebHost:
		return "", fmt.Sprintf("web service URL %s is not on the broker's own host %s", clip(b.Web), b.Host)
	case !slices.Contains(s.opts.AllowedWebPorts, port):
		return "", fmt.Sprintf("web service URL %s: port %s is not in broker.allowedWebPorts %v", clip(b.Web), port, s.opts.AllowedWebPorts)
	}
	return WebURL(tls, host, port), ""
}

func schemeOf(tls bool) string {
	if tls {
		return "https://"
	}
	return "http://"
}

// clip quotes a value read from a registry for a log line, cut to a readable length (a znode
// may hold a megabyte).
func clip(v string) string {
	const maxLen = 120
	if len(v) > maxLen {
		return strconv.Quote(v[:maxLen]) + "..."
	}
	return strconv.Quote(v)
}

// Allow checks a client's proxy_to_broker_url against the target rule (see Set).
func (s *Set) Allow(target string) (Broker, error) {
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

// Learn records a broker URL that a broker the proxy asked named in a LOOKUP answer, so a
// client told to connect there may (see the rule on Set). Discovery's own brokers and
// URLs on other ports are not recorded.
func (s *Set) Learn(rawURL string) {
	if s.opts.LearnedTTL <= 0 || rawURL == "" {
		return
	}
	b, err := ParseURL(rawURL)
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
func (s *Set) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changeCh
}

// Pick returns the brokers to try for a lookup, healthy ones first, rotated so load spreads
// (round robin within each group).
func (s *Set) Pick() ([]Broker, error) {
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

func (s *Set) noBroker() error {
	if p, ok := s.discovery.(ProblemReporter); ok {
		if msg := p.Problem(); msg != "" {
			return fmt.Errorf("%w: discovery lists no broker (%s)", ErrNoBroker, msg)
		}
	}
	return fmt.Errorf("%w: discovery lists no broker", ErrNoBroker)
}

// Ready reports whether at least one broker passed its last probe, with a reason when not.
func (s *Set) Ready() (bool, string) {
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

// ProbeAll probes every live broker once, concurrently, and records the results (what
// RunHealthChecks does every interval).
func (s *Set) ProbeAll(ctx context.Context, probe Prober, timeout time.Duration) {
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
			s.recordLocked(b, err)
		}()
	}
	wg.Wait()
}

// recordLocked keeps a probe's result and tells the operator when it changes the broker's
// state: unreachable (with the reason) once when it stops answering, reachable again once when
// it answers again (with how long it was down). A first probe that finds it up is
// informational; the same failure probe after probe is not repeated.
func (s *Set) recordLocked(b Broker, err error) {
	k := b.key()
	was, probed := s.healthy[k]
	s.healthy[k] = err == nil
	now := s.opts.Now()
	switch {
	case err != nil && (was || !probed):
		s.reason[k] = err.Error()
		s.downSince[k] = now
		s.opts.Logger.Warn().Str("broker", b.URL).Str("reason", err.Error()).Bool("first_probe", !probed).
			Msg("broker unreachable: its health probe failed; lookups go to the other brokers")
	case err != nil:
		s.reason[k] = err.Error()
	case probed && !was:
		ev := s.opts.Logger.Warn().Str("broker", b.URL).Str("last_error", s.reason[k])
		jsonlog.Seconds(ev, "unreachable_for", now.Sub(s.downSince[k])).Msg("broker reachable again")
		delete(s.reason, k)
		delete(s.downSince, k)
	case !probed:
		s.opts.Logger.Info().Str("broker", b.URL).Msg("broker reachable")
	}
}

// RunHealthChecks probes all brokers every interval, and at once when the set changes, until
// ctx ends.
func (s *Set) RunHealthChecks(ctx context.Context, probe Prober, interval, timeout time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		changed := s.Changed()
		s.ProbeAll(ctx, probe, timeout)
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
func (s *Set) RegisterMetrics(reg prometheus.Registerer) {
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
func (s *Set) WebURLs() []string {
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
// API redirect's Location): scheme is http or https, host and port as in the URL. Its port
// must be in AllowedWebPorts, and it is allowed when it is the web service of a live broker
// (one that passed the web rule), or when its host matches an AllowedHosts pattern and scheme
// and port are those of a live broker's web service (a pattern never opens a port discovery
// did not name). Hosts are compared as written, never resolved; learned lookup targets do not
// apply (they are binary endpoints).
func (s *Set) AllowWeb(scheme, host, port string) bool {
	h, p, err := brokerhost.SplitHostPort(Broker{Host: host, Port: port}.Addr())
	if err != nil {
		return false
	}
	u := WebURL(strings.EqualFold(scheme, "https"), h, p)
	if !strings.EqualFold(scheme, "https") && !strings.EqualFold(scheme, "http") || !slices.Contains(s.opts.AllowedWebPorts, p) {
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
