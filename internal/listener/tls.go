// Package listener prepares client connections before a session sees them: it terminates
// TLS (with certificates reloaded from disk) and reads PROXY protocol headers. The slow
// parts run in Conn.HandshakeContext, which the session calls in its own goroutine, so a
// slow or silent client never blocks Accept.
package listener

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/pulsar-proxy/pulsar-proxy/internal/certfile"
)

// TLSOptions configures the client-facing TLS listener.
type TLSOptions struct {
	CertFile     string
	KeyFile      string
	MinVersion   uint16   // tls.VersionTLS10 … tls.VersionTLS13; 0 = TLS 1.2
	CipherSuites []string // Go names, e.g. TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256; empty = Go's defaults
	ClientCAFile string   // CA bundle verifying client certificates; "" = no client certificates
	ClientAuth   string   // none, request or require
	// checkEvery bounds how often the files' mtimes are looked at; 0 = one second.
	checkEvery time.Duration
}

// Metrics counts TLS handshakes and exposes the served certificate's expiry.
type Metrics struct {
	handshakes *prometheus.CounterVec // result: ok, error, timeout
	expiry     prometheus.Gauge
}

// NewMetrics registers the listener metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		handshakes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulsar_proxy_tls_handshakes_total", Help: "TLS handshakes with clients, by result (ok, error, timeout).",
		}, []string{"result"}),
		expiry: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pulsar_proxy_tls_certificate_expiry_timestamp_seconds", Help: "NotAfter of the server certificate being served, as a Unix time.",
		}),
	}
	reg.MustRegister(m.handshakes, m.expiry)
	for _, r := range []string{"ok", "error", "timeout"} { // from the start, at 0
		m.handshakes.WithLabelValues(r)
	}
	return m
}

// NewTLSConfig loads the certificate (failing if it cannot) and returns a server config
// whose certificate follows the files on disk.
func NewTLSConfig(o TLSOptions, m *Metrics, log zerolog.Logger) (*tls.Config, error) {
	r, err := certfile.New(certfile.Options{CertFile: o.CertFile, KeyFile: o.KeyFile, Every: o.checkEvery, Log: log,
		OnLoad: func(c *x509.Certificate) {
			if m != nil {
				m.expiry.Set(float64(c.NotAfter.Unix()))
			}
		}})
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: cmp.Or(o.MinVersion, tls.VersionTLS12), GetCertificate: r.GetCertificate}
	if len(o.CipherSuites) > 0 {
		byName := map[string]uint16{}
		for _, cs := range append(tls.CipherSuites(), tls.InsecureCipherSuites()...) {
			byName[cs.Name] = cs.ID
		}
		for _, n := range o.CipherSuites {
			id, ok := byName[n]
			if !ok {
				return nil, fmt.Errorf("tls.cipherSuites: unknown cipher suite %q", n)
			}
			cfg.CipherSuites = append(cfg.CipherSuites, id)
		}
	}
	switch o.ClientAuth {
	case "", "none":
		cfg.ClientAuth = tls.NoClientCert
	case "request":
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
	case "require":
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	default:
		return nil, fmt.Errorf("tls.clientAuth: %q is not one of none, request, require", o.ClientAuth)
	}
	if cfg.ClientAuth != tls.NoClientCert {
		if o.ClientCAFile == "" {
			return nil, errors.New("tls.clientAuth: " + o.ClientAuth + " needs tls.clientCAFile")
		}
		pem, err := os.ReadFile(o.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("tls.clientCAFile: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls.clientCAFile: no PEM certificate in %s", o.ClientCAFile)
		}
		cfg.ClientCAs = pool
	}
	return cfg, nil
}
