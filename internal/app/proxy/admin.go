package proxy

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/pulsar-proxy/pulsar-proxy/adminproxy"
	"github.com/pulsar-proxy/pulsar-proxy/brokers"
	"github.com/pulsar-proxy/pulsar-proxy/internal/config"
	"github.com/pulsar-proxy/pulsar-proxy/internal/httpapi"
	"github.com/pulsar-proxy/pulsar-proxy/internal/jsonlog"
	"github.com/pulsar-proxy/pulsar-proxy/internal/listener"
	"github.com/pulsar-proxy/pulsar-proxy/session"
)

// buildAdmin makes the admin API proxy (nil without admin.enabled): the brokers' web services
// from the live set, the Functions workers from admin.functionWorkers or else the brokers,
// client authentication as on the binary listener, TLS to https:// web services with the
// trust settings of broker.tls.
func buildAdmin(cfg *config.Config, set *brokers.Set, sec session.Security, creds func() (string, []byte, error),
	advertise func(*http.Request) adminproxy.Advertised, reg prometheus.Registerer, log zerolog.Logger, refusals adminproxy.Refusals) (*adminproxy.Proxy, error) {
	a := cfg.Admin
	if !a.Enabled {
		return nil, nil
	}
	c := adminproxy.Config{
		Brokers:                   set,
		Auth:                      sec.Authenticator,
		AuthFailures:              sec.Metrics,
		Refusals:                  refusals,
		Policy:                    sec.Edge,
		ProxyCredentials:          creds,
		ForwardClientCredentials:  cfg.Auth.ForwardClientCredentials,
		Advertise:                 advertise,
		DialTimeout:               cfg.Broker.DialTimeout,
		ResponseTimeout:           a.ResponseTimeout,
		RequestTimeout:            a.RequestTimeout,
		ReadTimeout:               a.ReadTimeout,
		MaxConcurrent:             a.MaxConcurrent,
		MaxConcurrentPerPrincipal: a.PerPrincipal(),
		MinBodyRate:               float64(a.MinBodyRate),
		MinBodyRateGrace:          a.MinBodyRateGrace,
		IPv6PrefixLength:          cfg.Session.IPv6PrefixLength,
		MaxBodySize:               a.MaxBodySize,
		SpoolBudget:               a.MaxSpooledBytes,
		MaxRedirects:              a.MaxRedirects,
		AccessLog:                 zerolog.Disabled,
		Logger:                    log,
		Metrics:                   adminproxy.NewMetrics(reg),
	}
	if a.AccessLog != "off" {
		level, err := zerolog.ParseLevel(a.AccessLog)
		if err != nil {
			return nil, fmt.Errorf("admin.accessLog: %w", err)
		}
		c.AccessLog = level
	}
	if len(a.FunctionWorkers) > 0 {
		workers, err := adminproxy.NewStaticUpstreams(a.FunctionWorkers)
		if err != nil {
			return nil, fmt.Errorf("admin.functionWorkers: %w", err)
		}
		c.Workers = workers
	}
	var err error
	if c.TLS, err = brokerTLSConfig(cfg, log); err != nil {
		return nil, err
	}
	return adminproxy.New(c)
}

// httpHandler is the HTTP plane: /healthz, /readyz, /metrics, the admin API and the
// WebSocket API when on.
func (p *Proxy) httpHandler() http.Handler {
	h := httpapi.Handler(p.reg, p.ready)
	if p.admin != nil {
		h = p.admin.Handler(h)
	}
	if p.ws != nil {
		h = p.ws.Handler(h)
	}
	return h
}

// newHTTPServer is the server of listen.http and admin.listenHTTPS: headers within
// admin.readTimeout (10 s without the admin API), idle keep-alive connections closed after
// two minutes.
func (p *Proxy) newHTTPServer() *http.Server {
	headers := 10 * time.Second
	if p.admin != nil {
		headers = p.cfg.Admin.ReadTimeout
	}
	return &http.Server{Handler: p.httpHandler(), ReadHeaderTimeout: headers, IdleTimeout: 2 * time.Minute,
		ErrorLog: jsonlog.StdLogger(p.log, "HTTP server error"), MaxHeaderBytes: 64 << 10}
}

// httpsListener opens admin.listenHTTPS with the certificate of tls.certFile/keyFile,
// reloaded as for the Pulsar TLS listener, and the client-certificate settings of tls.*; the
// connection limits apply under TLS, so a refused client costs no handshake (and is closed
// without a word: an answer would need one).
func (p *Proxy) httpsListener() (net.Listener, error) {
	cfg, log := p.cfg, p.log
	if cfg.Admin.ListenHTTPS == "" {
		return nil, nil
	}
	tc, err := listener.NewTLSConfig(ClientTLS(cfg.TLS), nil, log)
	if err != nil {
		return nil, fmt.Errorf("admin.listenHTTPS: %w", err)
	}
	tc.NextProtos = []string{"http/1.1"}
	ln, err := net.Listen("tcp", cfg.Admin.ListenHTTPS)
	if err != nil {
		return nil, fmt.Errorf("admin.listenHTTPS: %w", err)
	}
	return tls.NewListener(p.limitHTTP(ln, "https", p.fdHTTPS, nil), tc), nil
}
