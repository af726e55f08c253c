package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/internal/httpapi"
)

// startBackground runs discovery, broker health checks, the identity provider's key set and
// the policy reloads (also on SIGHUP) until ctx ends.
func (p *proxy) startBackground(ctx context.Context) {
	for _, provider := range p.providers {
		go provider.Run(ctx)
	}
	go p.brokers.RunHealthChecks(ctx, p.pool.Ping, p.cfg.Discovery.HealthCheckInterval, p.cfg.Broker.ConnectTimeout)
	if p.jwks != nil {
		// In the background: a provider that is down must not keep the proxy from starting
		// (clients of other methods, and the readiness probe, do not depend on it).
		go p.jwks.Run(ctx)
	}
	if p.policy != nil {
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		go func() {
			defer signal.Stop(hup)
			p.policy.Watch(ctx, p.cfg.Authz.ReloadInterval, hup)
		}()
	}
}

// ready is /readyz: not while draining or before the Pulsar listeners serve, then as the
// broker set says.
func (p *proxy) ready() (bool, string) {
	switch {
	case p.sessions.Draining():
		return false, "draining"
	case !p.listening.Load():
		return false, "pulsar listener not serving"
	}
	return p.brokers.Ready()
}

// serveHTTP serves the HTTP plane (/healthz, /readyz, /metrics, the admin API) on listen.http
// and, when set, admin.listenHTTPS.
func (p *proxy) serveHTTP(lns listeners) []*http.Server {
	srvs := []*http.Server{p.newHTTPServer()}
	go srvs[0].Serve(lns.http)
	if lns.https != nil {
		srvs = append(srvs, p.newHTTPServer())
		go srvs[1].Serve(lns.https)
	}
	return srvs
}

// servePprof serves Go's profiles on a listener of their own (listen.pprof).
func servePprof(addr string) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen.pprof: %w", err)
	}
	srv := &http.Server{Handler: httpapi.Pprof(), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	return srv, nil
}

// serve starts the sessions on the Pulsar listeners and logs the start; the channel gets a
// listener's error.
func (p *proxy) serve(lns listeners) <-chan error {
	serveErr := make(chan error, 2)
	p.listening.Store(true)
	go func() { serveErr <- p.sessions.Serve(lns.pulsar) }()
	started := p.log.Info().Str("pulsar", lns.pulsar.Addr().String())
	if lns.pulsarTLS != nil {
		go func() { serveErr <- p.sessions.Serve(lns.pulsarTLS) }()
		started = started.Str("pulsar_tls", lns.pulsarTLS.Addr().String())
	}
	providerNames := make([]string, len(p.providers))
	for i, provider := range p.providers {
		providerNames[i] = provider.Name()
	}
	if lns.https != nil {
		started = started.Str("https", lns.https.Addr().String())
	}
	started.Str("http", lns.http.Addr().String()).Bool("admin_api", p.admin != nil).
		Strs("discovery", providerNames).Str("version", version).
		Str("forwarding", p.forwarding()).Bool("broker_tls", p.brokerTLS).
		Str("broker_proxy_protocol", p.cfg.Broker.BrokerProxyProtocol).
		Bool("authentication", p.sec.Authenticator != nil).Bool("authorization", p.sec.Edge.Policed()).
		Msg("pulsar-proxy started")
	return serveErr
}

// forwarding names how direct sessions move bytes, for the startup line: passthrough
// (socket to socket, see session.passthrough) needs nothing to inspect the frames.
func (p *proxy) forwarding() string {
	if p.muxPool != nil {
		return "multiplexed (shared broker connections per broker and principal)"
	}
	if p.cfg.Session.Passthrough && !p.sec.InspectsFrames() {
		return "passthrough (plaintext TCP on both sides; framed otherwise)"
	}
	return "framed"
}

// drain turns /readyz to 503, hands the sessions over within session.drainTimeout, then
// stops the HTTP servers (admin requests in progress get up to five seconds to finish).
func (p *proxy) drain(httpSrvs ...*http.Server) {
	p.listening.Store(false)
	timeout := p.cfg.Session.DrainTimeout
	drainCtx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	began := time.Now()
	switch err := p.sessions.Shutdown(drainCtx); {
	case errors.Is(err, context.DeadlineExceeded):
		p.log.Warn().Dur("drain_timeout", timeout).Msg("sessions still open at the drain deadline were closed")
	case err != nil:
		p.log.Warn().Err(err).Msg("drain")
	default:
		p.log.Info().Dur("took", time.Since(began)).Msg("every session handed over")
	}
	shutdownCtx, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	for _, srv := range httpSrvs {
		srv.Shutdown(shutdownCtx)
	}
	if p.admin != nil {
		p.admin.Close()
	}
}
