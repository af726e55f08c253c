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
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
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
	return m
}

// NewTLSConfig loads the certificate (failing if it cannot) and returns a server config
// whose certificate follows the files on disk.
func NewTLSConfig(o TLSOptions, m *Metrics, log zerolog.Logger) (*tls.Config, error) {
	r := &certReloader{certFile: o.CertFile, keyFile: o.KeyFile, every: o.checkEvery, metrics: m, log: log, now: time.Now}
	if r.every <= 0 {
		r.every = time.Second
	}
	if err := r.load(); err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: cmp.Or(o.MinVersion, tls.VersionTLS12), GetCertificate: r.getCertificate}
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

// certReloader serves the certificate in certFile/keyFile, re-reading them when their
// mtimes change (looked at no more than once per every), so that a renewed certificate is
// served without a restart. A renewal that fails to load keeps the old certificate.
type certReloader struct {
	certFile, keyFile string
	every             time.Duration
	metrics           *Metrics
	log               zerolog.Logger
	now               func() time.Time

	mu           sync.Mutex
	cert         *tls.Certificate
	certMod      time.Time
	keyMod       time.Time
	checked      time.Time
	failedSample string // mtimes of the last failed load, logged once
}

func (r *certReloader) mtimes() (time.Time, time.Time, error) {
	c, err := os.Stat(r.certFile)
	if err != nil {
		return time.Time{}, time.Time{}, err
	}
	k, err := os.Stat(r.keyFile)
	if err != nil {
		return time.Time{}, time.Time{}, err
	}
	return c.ModTime(), k.ModTime(), nil
}

// load reads both files; callers other than NewTLSConfig hold mu.
func (r *certReloader) load() error {
	cm, km, err := r.mtimes()
	if err != nil {
		return fmt.Errorf("tls certificate: %w", err)
	}
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("tls certificate: %w", err)
	}
	r.cert, r.certMod, r.keyMod = &cert, cm, km
	if cert.Leaf != nil && r.metrics != nil {
		r.metrics.expiry.Set(float64(cert.Leaf.NotAfter.Unix()))
	}
	return nil
}

func (r *certReloader) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.current()
}

func (r *certReloader) getClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return r.current()
}

// current is the certificate to present now, reloaded first if the files changed.
func (r *certReloader) current() (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if now.Sub(r.checked) < r.every {
		return r.cert, nil
	}
	r.checked = now
	cm, km, err := r.mtimes()
	if err != nil || (cm.Equal(r.certMod) && km.Equal(r.keyMod)) {
		return r.cert, nil // a file briefly missing mid-rotation: keep serving the old one
	}
	sample := cm.String() + "|" + km.String()
	if err := r.load(); err != nil {
		// cert-manager may write the two files a moment apart: the pair may not match yet.
		if sample != r.failedSample {
			r.log.Warn().Err(err).Msg("renewed TLS certificate does not load; still serving the previous one")
			r.failedSample = sample
		}
		return r.cert, nil
	}
	r.failedSample = ""
	r.log.Info().Str("cert", r.certFile).Time("not_after", r.cert.Leaf.NotAfter).Msg("TLS certificate reloaded")
	return r.cert, nil
}
