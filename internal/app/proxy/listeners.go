package proxy

import (
	"crypto/tls"
	"fmt"
	"net"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/pulsar-proxy/pulsar-proxy/internal/config"
	"github.com/pulsar-proxy/pulsar-proxy/internal/connlimit"
	"github.com/pulsar-proxy/pulsar-proxy/internal/listener"
	"github.com/pulsar-proxy/pulsar-proxy/upstream"
)

// listeners are the proxy's sockets; pulsar is nil without listen.pulsar (a TLS-only proxy),
// pulsarTLS without listen.pulsarTLS, https without admin.listenHTTPS, pprof without
// listen.pprof. Validation leaves at least one of pulsar and pulsarTLS.
type listeners struct {
	pulsar, pulsarTLS, pulsarSNI, http, https, pprof net.Listener
}

// openListeners opens the client listeners, listen.http, admin.listenHTTPS and listen.pprof,
// or none of them.
func (p *Proxy) openListeners() (l listeners, err error) {
	defer func() {
		if err != nil {
			l.close()
		}
	}()
	if l.pulsar, l.pulsarTLS, err = clientListeners(p.cfg, p.reg, p.log); err != nil {
		return l, err
	}
	if a := p.cfg.Listen.PulsarSNI; a != "" {
		// Bare: the SNI plane reads any PROXY header itself and relays the socket.
		if l.pulsarSNI, err = net.Listen("tcp", a); err != nil {
			return l, fmt.Errorf("listen.pulsarSNI: %w", err)
		}
	}
	ln, err := net.Listen("tcp", p.cfg.Listen.HTTP)
	if err != nil {
		return l, fmt.Errorf("listen.http: %w", err)
	}
	l.http = p.limitHTTP(ln, "http", p.fdHTTP, httpRefusal())
	if l.https, err = p.httpsListener(); err != nil {
		return l, err
	}
	if p.cfg.Listen.Pprof != "" {
		if l.pprof, err = net.Listen("tcp", p.cfg.Listen.Pprof); err != nil {
			return l, fmt.Errorf("listen.pprof: %w", err)
		}
	}
	return l, nil
}

// close closes the listeners that are open (the sessions and HTTP servers close those they
// serve).
func (l listeners) close() {
	for _, ln := range []net.Listener{l.pulsar, l.pulsarTLS, l.pulsarSNI, l.http, l.https, l.pprof} {
		if ln != nil {
			ln.Close()
		}
	}
}

// addrs are the addresses the listeners are bound to.
func (l listeners) addrs() Addrs {
	addr := func(ln net.Listener) string {
		if ln == nil {
			return ""
		}
		return ln.Addr().String()
	}
	return Addrs{Pulsar: addr(l.pulsar), PulsarTLS: addr(l.pulsarTLS), PulsarSNI: addr(l.pulsarSNI), HTTP: addr(l.http), HTTPS: addr(l.https), Pprof: addr(l.pprof)}
}

// httpRefusal is what a plaintext HTTP client over a connection limit is told before its
// connection is closed, in the shape of Pulsar's error answers: one write, no request read.
func httpRefusal() []byte {
	body := `{"reason":"pulsar-proxy: too many connections, retry later"}` + "\n"
	return []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
}

// limitHTTP applies the session.* connection limits and the listener's part of the
// descriptor budget to an HTTP listener, as it accepts: the HTTP listeners read no PROXY
// header, so the socket's peer is the client the per-IP limits count.
func (p *Proxy) limitHTTP(ln net.Listener, name string, share *connlimit.Share, refusal []byte) net.Listener {
	s := p.cfg.Session
	return connlimit.NewListener(ln, connlimit.ListenerConfig{
		Name: name,
		Limits: connlimit.Limits{
			MaxConnections:   s.MaxConnections,
			MaxPerIP:         s.MaxConnectionsPerIP,
			RatePerIP:        s.ConnectionRatePerIP,
			BurstPerIP:       s.ConnectionBurstPerIP,
			IPv6PrefixLength: s.IPv6PrefixLength,
		},
		Share:    share,
		Refusal:  refusal,
		Metrics:  p.httpConns,
		Log:      p.log,
		Refusals: p.refusals,
	})
}

// clientListeners opens listen.pulsar and listen.pulsarTLS, each when set, wrapped for TLS and
// the PROXY protocol as configured. plain is nil without a plaintext listener (TLS only),
// tlsLn without a TLS listener.
func clientListeners(cfg *config.Config, reg prometheus.Registerer, log zerolog.Logger) (plain, tlsLn net.Listener, err error) {
	pp := proxyOptions(cfg)
	opts := listener.Options{Proxy: pp}
	if cfg.Listen.PulsarTLS != "" {
		m := listener.NewMetrics(reg)
		tc, err := listener.NewTLSConfig(ClientTLS(cfg.TLS), m, log)
		if err != nil {
			return nil, nil, err
		}
		ln, err := net.Listen("tcp", cfg.Listen.PulsarTLS)
		if err != nil {
			return nil, nil, fmt.Errorf("listen.pulsarTLS: %w", err)
		}
		tlsLn = listener.Wrap(ln, listener.Options{TLS: tc, Proxy: pp, Metrics: m})
	}
	if cfg.Listen.Pulsar == "" {
		return nil, tlsLn, nil
	}
	ln, err := net.Listen("tcp", cfg.Listen.Pulsar)
	if err != nil {
		if tlsLn != nil {
			tlsLn.Close()
		}
		return nil, nil, fmt.Errorf("listen.pulsar: %w", err)
	}
	return listener.Wrap(ln, opts), tlsLn, nil
}

// proxyOptions are proxyProtocol.*: the PROXY headers every client listener reads.
func proxyOptions(cfg *config.Config) listener.ProxyOptions {
	return listener.ProxyOptions{
		Enabled:       cfg.ProxyProtocol.Enabled,
		TrustedCIDRs:  cfg.ProxyProtocol.TrustedCIDRs,
		RequireHeader: cfg.ProxyProtocol.RequireHeader,
		HeaderTimeout: cfg.ProxyProtocol.HeaderTimeout,
	}
}

// brokerDialer is how the control connections and the sessions reach brokers: broker.tls and
// broker.proxyProtocol.
// ClientTLS is the client-facing TLS of listen.pulsarTLS and admin.listenHTTPS.
func ClientTLS(t config.TLS) listener.TLSOptions {
	return listener.TLSOptions{CertFile: t.CertFile, KeyFile: t.KeyFile, MinVersion: uint16(t.MinVersion),
		CipherSuites: t.CipherSuites, ClientCAFile: t.ClientCAFile, ClientAuth: t.ClientAuth}
}

func brokerDialer(cfg *config.Config, log zerolog.Logger) (*upstream.Dialer, error) {
	tc, err := brokerTLSConfig(cfg, log)
	if err != nil {
		return nil, err
	}
	return &upstream.Dialer{Timeout: cfg.Broker.DialTimeout, ProxyHeader: cfg.Broker.ProxyHeaderVersion(), TLS: tc}, nil
}

// brokerTLSConfig is broker.tls as a client configuration, for the brokers' Pulsar and web
// ports alike; nil without broker.tls.enabled.
func brokerTLSConfig(cfg *config.Config, log zerolog.Logger) (*tls.Config, error) {
	bt := cfg.Broker.TLS
	if !bt.Enabled {
		return nil, nil
	}
	return upstream.NewTLSConfig(upstream.TLSOptions{
		TrustCertsFile:           bt.TrustCertsFile,
		CertFile:                 bt.CertFile,
		KeyFile:                  bt.KeyFile,
		MinVersion:               uint16(bt.MinVersion),
		SkipHostnameVerification: bt.SkipHostnameVerification,
	}, log)
}
