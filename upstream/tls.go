package upstream

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/rs/zerolog"

	"github.com/pulsar-proxy/pulsar-proxy/internal/certfile"
)

// TLSOptions configures TLS on the proxy's connections to brokers.
type TLSOptions struct {
	TrustCertsFile string // PEM CA bundle; "" = the system's roots
	CertFile       string // the proxy's client certificate; "" = none
	KeyFile        string
	MinVersion     uint16 // tls.VersionTLS12 or tls.VersionTLS13; 0 = TLS 1.2
	// SkipHostnameVerification accepts a certificate whose names do not include the
	// dialled host; its chain is still verified.
	SkipHostnameVerification bool
}

// NewTLSConfig returns the client config for broker connections; the dialer sets
// ServerName per broker. A client certificate follows its files on disk, as the
// listener's certificate does.
func NewTLSConfig(o TLSOptions, log zerolog.Logger) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: cmp.Or(o.MinVersion, tls.VersionTLS12)}
	if o.TrustCertsFile != "" {
		pem, err := os.ReadFile(o.TrustCertsFile)
		if err != nil {
			return nil, fmt.Errorf("broker.tls.trustCertsFile: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("broker.tls.trustCertsFile: no PEM certificate in %s", o.TrustCertsFile)
		}
	}
	if o.CertFile != "" {
		r, err := certfile.New(certfile.Options{CertFile: o.CertFile, KeyFile: o.KeyFile, Log: log})
		if err != nil {
			return nil, fmt.Errorf("broker.tls.certFile: %w", err)
		}
		cfg.GetClientCertificate = r.GetClientCertificate
	}
	if o.SkipHostnameVerification {
		// Go verifies chain and name together; to keep the chain check alone, turn the
		// built-in one off and verify the chain in VerifyConnection.
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = verifyChainOnly(cfg.RootCAs) // the proxy warns of it at start (config.Warnings)
	}
	return cfg, nil
}

// verifyChainOnly checks that the peer's certificate chains to roots (nil: the system's),
// without looking at the names in it.
func verifyChainOnly(roots *x509.CertPool) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("broker presented no certificate")
		}
		opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool()}
		for _, c := range cs.PeerCertificates[1:] {
			opts.Intermediates.AddCert(c)
		}
		if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
			return &tls.CertificateVerificationError{UnverifiedCertificates: cs.PeerCertificates, Err: err}
		}
		return nil
	}
}
