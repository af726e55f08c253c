// Package certfile serves a TLS certificate from its files on disk, re-reading them when
// they change, so a renewed certificate (cert-manager rotating a Secret) is used without a
// restart. The client listener and the broker dialer both present certificates this way.
package certfile

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Reloader serves the certificate in CertFile/KeyFile, re-reading them when their
// modification times change (looked at no more than once per Every). A renewal that fails
// to load keeps the old certificate.
type Reloader struct {
	certFile, keyFile string
	every             time.Duration
	log               zerolog.Logger
	onLoad            func(*x509.Certificate)
	now               func() time.Time

	mu           sync.Mutex
	cert         *tls.Certificate
	certMod      time.Time
	keyMod       time.Time
	checked      time.Time
	failedSample string // mtimes of the last failed load, logged once
}

// Options configure a Reloader.
type Options struct {
	CertFile, KeyFile string
	Every             time.Duration // <= 0: one second
	Log               zerolog.Logger
	// OnLoad, when set, is told each certificate loaded (for an expiry metric).
	OnLoad func(*x509.Certificate)
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

// New loads the certificate, failing if it cannot.
func New(o Options) (*Reloader, error) {
	r := &Reloader{certFile: o.CertFile, keyFile: o.KeyFile, every: o.Every, log: o.Log, onLoad: o.OnLoad, now: o.Now}
	if r.every <= 0 {
		r.every = time.Second
	}
	if r.now == nil {
		r.now = time.Now
	}
	if err := r.load(); err != nil {
		return nil, err
	}
	return r, nil
}

// GetCertificate is for tls.Config.GetCertificate.
func (r *Reloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.current()
}

// GetClientCertificate is for tls.Config.GetClientCertificate.
func (r *Reloader) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return r.current()
}

func (r *Reloader) mtimes() (time.Time, time.Time, error) {
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

// load reads both files; callers other than New hold mu.
func (r *Reloader) load() error {
	cm, km, err := r.mtimes()
	if err != nil {
		return fmt.Errorf("tls certificate: %w", err)
	}
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("tls certificate: %w", err)
	}
	r.cert, r.certMod, r.keyMod = &cert, cm, km
	if cert.Leaf != nil && r.onLoad != nil {
		r.onLoad(cert.Leaf)
	}
	return nil
}

// current is the certificate to present now, reloaded first if the files changed.
func (r *Reloader) current() (*tls.Certificate, error) {
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
