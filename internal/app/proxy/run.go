package proxy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/internal/httpapi"
	"github.com/pulsar-proxy/pulsar-proxy/internal/jsonlog"
	"github.com/pulsar-proxy/pulsar-proxy/upstream"
)

// httpShutdownTimeout is how long admin requests in progress get to finish once the sessions
// are drained.
const httpShutdownTimeout = 5 * time.Second

// Run opens the listeners, starts the background work, serves, and once ctx ends drains the
// sessions within session.drainTimeout and stops. It returns early, with an error, when a
// listener cannot be opened or a Pulsar listener fails. Call it once; Close after it.
func (p *Proxy) Run(ctx context.Context) error {
	lns, err := p.openListeners()
	if err != nil {
		return err
	}
	// The background work outlives ctx by the drain: sessions still look brokers up and need
	// the broker set kept current while they hand over.
	stopBackground := p.startBackground(context.WithoutCancel(ctx))
	defer stopBackground()
	httpSrvs := p.serveHTTP(lns)
	pulsar := p.serve(lns)
	select {
	case <-ctx.Done():
		jsonlog.Seconds(p.log.Info(), "drain_timeout", p.cfg.Session.DrainTimeout).Msg("stopping: draining sessions")
		p.drain(httpSrvs)
		pulsar.wg.Wait()
	case err := <-pulsar.errs:
		p.listening.Store(false)
		p.halt(httpSrvs)
		pulsar.wg.Wait()
		return fmt.Errorf("pulsar listener: %w", err)
	}
	p.refusals.Close() // what was counted since the last summaries
	p.log.Info().Msg("pulsar-proxy stopped")
	return nil
}

// startBackground runs discovery, broker health checks, the identity provider's key set and
// the policy reloads (also on Options.Reload) until the returned function is called, which
// waits for them to end.
func (p *Proxy) startBackground(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, provider := range p.providers {
		wg.Go(func() { provider.Run(ctx) })
	}
	ownPing := func(ctx context.Context, addr string) error { return p.control.Ping(ctx, addr, upstream.Client{}) }
	wg.Go(func() {
		p.brokers.RunHealthChecks(ctx, ownPing, p.cfg.Discovery.HealthCheckInterval, p.cfg.Broker.ConnectTimeout)
	})
	wg.Go(func() { p.brokerSeries(ctx) })
	if p.jwks != nil {
		// In the background: a provider that is down must not keep the proxy from starting
		// (clients of other methods, and the readiness probe, do not depend on it).
		wg.Go(func() { p.jwks.Run(ctx) })
	}
	if p.policy != nil {
		wg.Go(func() { p.policy.Watch(ctx, p.cfg.Authz.ReloadInterval, p.reload) })
	}
	if p.basic != nil {
		wg.Go(func() { p.basic.Watch(ctx, p.cfg.Auth.Basic.ReloadInterval) })
	}
	return func() { cancel(); wg.Wait() }
}

// brokerSeries makes the series of every broker in the live set as it joins it, until ctx
// ends; a broker that leaves keeps its series (their counts are history).
func (p *Proxy) brokerSeries(ctx context.Context) {
	for {
		changed := p.brokers.Changed()
		for _, b := range p.brokers.Brokers() {
			p.sessionMetrics.Broker(b.Addr())
			p.lookupMetrics.Broker(b.Addr())
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// ready is /readyz: not while draining or before the Pulsar listeners serve, then as the
// broker set says.
func (p *Proxy) ready() (bool, string) {
	switch {
	case p.sessions.Draining():
		return false, "draining"
	case !p.listening.Load():
		return false, "pulsar listener not serving"
	}
	return p.brokers.Ready()
}

// httpServers are the servers of the HTTP plane (listen.http and, when set,
// admin.listenHTTPS) and of listen.pprof (nil without it), and their Serve goroutines.
type httpServers struct {
	plane []*http.Server
	pprof *http.Server
	wg    sync.WaitGroup
}

// serveHTTP serves the HTTP plane (/healthz, /readyz, /metrics, the admin API) on listen.http
// and, when set, admin.listenHTTPS, and Go's profiles on listen.pprof when set.
func (p *Proxy) serveHTTP(lns listeners) *httpServers {
	s := &httpServers{}
	s.plane = append(s.plane, p.newHTTPServer())
	if lns.https != nil {
		s.plane = append(s.plane, p.newHTTPServer())
	}
	s.wg.Go(func() { s.plane[0].Serve(lns.http) })
	if lns.https != nil {
		s.wg.Go(func() { s.plane[1].Serve(lns.https) })
	}
	if lns.pprof != nil {
		s.pprof = &http.Server{Handler: httpapi.Pprof(), ReadHeaderTimeout: 10 * time.Second}
		s.wg.Go(func() { s.pprof.Serve(lns.pprof) })
	}
	return s
}

// stop lets the HTTP plane's requests in progress finish within timeout (none when it is 0),
// then closes every server and what is left of their connections.
func (s *httpServers) stop(timeout time.Duration) {
	if timeout > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		for _, srv := range s.plane {
			srv.Shutdown(ctx)
		}
	}
	// The process ends after Run: a request still running past the timeout would end with it.
	for _, srv := range append(s.plane, s.pprof) {
		if srv != nil {
			srv.Close()
		}
	}
	s.wg.Wait()
}

// serving is the Pulsar listeners' Serve goroutines: errs gets their errors.
type serving struct {
	errs chan error
	wg   sync.WaitGroup
}

// serve starts the sessions on the Pulsar listeners, logs the start and publishes the
// addresses (Started, Addrs).
func (p *Proxy) serve(lns listeners) *serving {
	s := &serving{errs: make(chan error, 3)}
	p.listening.Store(true)
	if lns.pulsar != nil {
		s.wg.Go(func() { s.errs <- p.sessions.Serve(lns.pulsar) })
	}
	if lns.pulsarTLS != nil {
		s.wg.Go(func() { s.errs <- p.sessions.Serve(lns.pulsarTLS) })
	}
	if lns.pulsarSNI != nil {
		s.wg.Go(func() { s.errs <- p.sni.Serve(lns.pulsarSNI) })
	}
	p.logStarted(lns)
	p.mu.Lock()
	p.addrs = lns.addrs()
	p.mu.Unlock()
	close(p.started)
	return s
}

// logStarted is the startup line: the addresses bound (which test/proxyproc reads; no
// "pulsar" key on a TLS-only proxy), and what an operator wants to know of the configuration
// at a glance.
func (p *Proxy) logStarted(lns listeners) {
	started := p.log.Info()
	if lns.pulsar != nil {
		started = started.Str("pulsar", lns.pulsar.Addr().String())
	}
	if lns.pulsarTLS != nil {
		started = started.Str("pulsar_tls", lns.pulsarTLS.Addr().String())
	}
	if lns.pulsarSNI != nil {
		started = started.Str("pulsar_sni", lns.pulsarSNI.Addr().String())
	}
	providerNames := make([]string, len(p.providers))
	for i, provider := range p.providers {
		providerNames[i] = provider.Name()
	}
	if lns.https != nil {
		started = started.Str("https", lns.https.Addr().String())
	}
	started.Str("http", lns.http.Addr().String()).Bool("admin_api", p.admin != nil).Bool("websocket_api", p.ws != nil).
		Strs("discovery", providerNames).Str("version", p.version).
		Str("forwarding", p.forwarding()).Bool("broker_tls", p.brokerTLS).
		Str("broker_proxy_protocol", p.cfg.Broker.ProxyProtocol).
		Bool("authentication", p.sec.Authenticator != nil).Bool("authorization", p.sec.Edge.Policed()).
		Msg("pulsar-proxy started")
}

// forwarding names how direct sessions move bytes, for the startup line: passthrough
// (socket to socket, see session.passthrough) needs nothing to inspect the frames.
func (p *Proxy) forwarding() string {
	if p.cfg.Broker.Multiplex {
		return "multiplexed (shared broker connections per broker and principal)"
	}
	if p.cfg.Session.Passthrough && !p.sec.InspectsFrames() {
		return "passthrough (plaintext TCP on both sides; framed otherwise)"
	}
	return "framed"
}

// drain turns /readyz to 503, hands the sessions over within session.drainTimeout, then
// stops the HTTP servers (admin requests in progress get up to httpShutdownTimeout).
func (p *Proxy) drain(httpSrvs *httpServers) {
	p.listening.Store(false)
	timeout := p.cfg.Session.DrainTimeout
	drainCtx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	began := time.Now()
	switch err := p.shutdownPlanes(drainCtx); {
	case errors.Is(err, context.DeadlineExceeded):
		jsonlog.Seconds(p.log.Warn(), "drain_timeout", timeout).Msg("sessions still open at the drain deadline were closed")
	case err != nil:
		p.log.Warn().Err(err).Msg("drain")
	default:
		jsonlog.Seconds(p.log.Info(), "took", time.Since(began)).Msg("every session handed over")
	}
	p.closeWebSockets(httpShutdownTimeout)
	httpSrvs.stop(httpShutdownTimeout)
	if p.admin != nil {
		p.admin.Close()
	}
}

// shutdownPlanes drains the binary planes side by side (the sessions and, with
// listen.pulsarSNI, the SNI relays) within ctx; its error is the first of theirs.
func (p *Proxy) shutdownPlanes(ctx context.Context) error {
	if p.sni == nil {
		return p.sessions.Shutdown(ctx)
	}
	sniErr := make(chan error, 1)
	go func() { sniErr <- p.sni.Shutdown(ctx) }()
	err := p.sessions.Shutdown(ctx)
	return cmp.Or(err, <-sniErr)
}

// halt stops at once, without a word, after a Pulsar listener failed: Run returns the error
// and the process ends, so nothing is handed over.
func (p *Proxy) halt(httpSrvs *httpServers) {
	now, cancel := context.WithCancel(context.Background())
	cancel()
	p.shutdownPlanes(now)
	p.closeWebSockets(0)
	httpSrvs.stop(0)
}

// closeWebSockets tells the WebSocket sessions the proxy goes away (1001) and waits up to
// timeout for them to end: the HTTP servers do not track the connections they upgraded.
func (p *Proxy) closeWebSockets(timeout time.Duration) {
	if p.ws == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(timeout, time.Millisecond))
	defer cancel()
	if err := p.ws.Shutdown(ctx); err != nil {
		p.log.Warn().Err(err).Msg("WebSocket sessions still open at the deadline")
	}
}
