// Package checkconfig is `pulsar-proxy check-config`: it loads a configuration as the proxy
// would (the file, then the PULSAR_PROXY_* environment, then every validation), checks that
// the files it names exist and parse the way the proxy reads them, optionally that discovery
// answers and a broker completes a CONNECT (Connect), and prints the effective configuration
// with secrets redacted (Redacted).
package checkconfig

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/rs/zerolog"

	"github.com/pulsar-proxy/pulsar-proxy/authn"
	"github.com/pulsar-proxy/pulsar-proxy/authz"
	"github.com/pulsar-proxy/pulsar-proxy/internal/app/cmdline"
	"github.com/pulsar-proxy/pulsar-proxy/internal/app/proxy"
	"github.com/pulsar-proxy/pulsar-proxy/internal/config"
	"github.com/pulsar-proxy/pulsar-proxy/internal/listener"
	"github.com/pulsar-proxy/pulsar-proxy/upstream"
)

// Exit codes of check-config (documented in docs/operations.md and in the command's usage).
const (
	ExitOK         = 0                 // valid; every referenced file present and readable as the proxy reads it
	ExitInvalid    = 1                 // the configuration is refused, or a file it names is missing, unreadable or expired
	ExitUsage      = cmdline.ExitUsage // bad command line
	ExitConnection = 3                 // --connect: valid, but discovery named no broker or none completed a CONNECT
)

// ExpiryWarning is how close to its end a certificate or token draws a warning.
const ExpiryWarning = 14 * 24 * time.Hour

// Severity of a Finding.
type Severity int

const (
	Info Severity = iota
	Warning
	Error
)

func (s Severity) String() string {
	switch s {
	case Warning:
		return "warning"
	case Error:
		return "error"
	}
	return "ok"
}

// Finding is one result of a check, about one configuration key.
type Finding struct {
	Severity Severity
	Key      string // the configuration key it concerns, e.g. "tls.certFile"
	Message  string
}

func (f Finding) String() string {
	return fmt.Sprintf("%-7s %s: %s", f.Severity, f.Key, f.Message)
}

// Report is what Check found.
type Report struct {
	Config   *config.Config // nil when the configuration was refused
	Findings []Finding
}

// Failed reports whether any finding is an error.
func (r *Report) Failed() bool {
	for _, f := range r.Findings {
		if f.Severity == Error {
			return true
		}
	}
	return false
}

// Write prints the findings, one a line.
func (r *Report) Write(w io.Writer) {
	for _, f := range r.Findings {
		fmt.Fprintln(w, f)
	}
}

func (r *Report) add(s Severity, key, format string, args ...any) {
	r.Findings = append(r.Findings, Finding{Severity: s, Key: key, Message: fmt.Sprintf(format, args...)})
}

// Check loads the configuration at path with environ (the environment, as os.Environ gives
// it) applied, then checks every file it names, with now as the time certificates and tokens
// are judged at.
func Check(path string, environ []string, now time.Time) *Report {
	r := &Report{}
	cfg, err := config.Load(path, environ)
	if err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			if line = strings.TrimSpace(line); line != "" && line != "invalid configuration:" {
				r.add(Error, "config", "%s", line)
			}
		}
		return r
	}
	r.Config = cfg
	r.add(Info, "config", "%s loads and validates (environment applied)", path)
	for _, im := range cfg.Implied() {
		r.add(Info, im.Key, "%s, implied by %s", im.Value, im.Because)
	}
	// The proxy's own start warnings, from the function it logs them from.
	for _, w := range proxy.Warnings(cfg) {
		r.add(Warning, w.Key, "%s", w.Message)
	}
	c := checker{r: r, now: now}
	c.clientTLS(cfg)
	c.brokerTLS(cfg)
	c.storeFiles(cfg)
	c.tokens(cfg)
	c.policy(cfg)
	return r
}

type checker struct {
	r   *Report
	now time.Time
}

// clientTLS loads the client listeners' TLS (listen.pulsarTLS, admin.listenHTTPS) exactly as
// the proxy does (certificate and key, cipher suites, client CA), then looks at the
// certificate's dates.
func (c checker) clientTLS(cfg *config.Config) {
	t := cfg.TLS
	if cfg.Listen.PulsarTLS == "" && cfg.Admin.ListenHTTPS == "" {
		return
	}
	_, err := listener.NewTLSConfig(proxy.ClientTLS(t), nil, zerolog.Nop())
	if err != nil {
		c.r.add(Error, "tls", "%v", err)
		return
	}
	c.certificate("tls.certFile", t.CertFile, t.KeyFile)
	if t.ClientCAFile != "" {
		c.caBundle("tls.clientCAFile", t.ClientCAFile)
	}
}

// brokerTLS loads the TLS client config towards brokers as the proxy does.
func (c checker) brokerTLS(cfg *config.Config) {
	b := cfg.Broker.TLS
	if !b.Enabled {
		return
	}
	_, err := upstream.NewTLSConfig(upstream.TLSOptions{
		TrustCertsFile: b.TrustCertsFile, CertFile: b.CertFile, KeyFile: b.KeyFile,
		MinVersion: uint16(b.MinVersion), SkipHostnameVerification: b.SkipHostnameVerification,
	}, zerolog.Nop())
	if err != nil {
		c.r.add(Error, "broker.tls", "%v", err)
		return
	}
	if b.TrustCertsFile != "" {
		c.caBundle("broker.tls.trustCertsFile", b.TrustCertsFile)
	} else {
		c.r.add(Info, "broker.tls.trustCertsFile", "empty: broker certificates are verified against the system's roots, or where it has none (the container image) the public roots built into the binary")
	}
	if b.CertFile != "" {
		c.certificate("broker.tls.certFile", b.CertFile, b.KeyFile)
	}
}

// storeFiles looks at the files of discovery.metadataStore (ZooKeeper's TLS and digest).
func (c checker) storeFiles(cfg *config.Config) {
	m := cfg.Discovery.MetadataStore
	if m.URL == "" {
		return
	}
	if m.DigestFile != "" {
		if b, err := os.ReadFile(m.DigestFile); err != nil {
			c.r.add(Error, "discovery.metadataStore.digestFile", "%v", err)
		} else if !strings.Contains(string(b), ":") {
			c.r.add(Error, "discovery.metadataStore.digestFile", "%s: want user:password", m.DigestFile)
		}
	}
	t := m.TLS
	if t.TrustCertsFile != "" {
		c.caBundle("discovery.metadataStore.tls.trustCertsFile", t.TrustCertsFile)
	}
	if t.CertFile != "" {
		c.certificate("discovery.metadataStore.tls.certFile", t.CertFile, t.KeyFile)
	}
}

// tokens reads the token keys and the proxy's own broker token as the proxy does.
func (c checker) tokens(cfg *config.Config) {
	a := cfg.Auth
	if f := a.Token.SecretKeyFile; f != "" {
		if k, err := authn.ReadSecretKey(f); err != nil {
			c.r.add(Error, "auth.token.secretKeyFile", "%v", err)
		} else if len(k) < 32 {
			c.r.add(Error, "auth.token.secretKeyFile", "%s: a %d-byte key; HS256 needs at least 32 bytes (the proxy and Pulsar's brokers refuse shorter ones)", f, len(k))
		} else {
			c.r.add(Info, "auth.token.secretKeyFile", "%s: a %d-byte HS256 key (the file's bytes as they are, as Pulsar reads a tokenSecretKey file)", f, len(k))
		}
	}
	if f := a.Token.PublicKeyFile; f != "" {
		if k, err := authn.ReadPublicKey(f); err != nil {
			c.r.add(Error, "auth.token.publicKeyFile", "%v", err)
		} else {
			c.r.add(Info, "auth.token.publicKeyFile", "%s: a %T", f, k)
		}
	}
	if f := a.Token.JWKSCAFile; f != "" {
		c.caBundle("auth.token.jwksCAFile", f)
	}
	if a.BrokerClient.Token == "" && a.BrokerClient.TokenFile == "" {
		return
	}
	key := "auth.brokerClient.token"
	if a.BrokerClient.TokenFile != "" {
		key = "auth.brokerClient.tokenFile"
	}
	_, data, err := authn.TokenCredentials(a.BrokerClient.Token, a.BrokerClient.TokenFile)()
	switch {
	case err != nil:
		c.r.add(Error, key, "%v", err)
	case len(data) == 0:
		c.r.add(Error, key, "the proxy's broker token is empty")
	default:
		c.brokerToken(key, string(data))
	}
}

// brokerToken looks at the proxy's own token without verifying it (the brokers hold the key):
// it must be a JWT, and one that has not expired.
func (c checker) brokerToken(key, token string) {
	claims := jwt.MapClaims{}
	if _, _, err := jwt.NewParser().ParseUnverified(token, claims); err != nil {
		c.r.add(Error, key, "not a JWT: %v", err)
		return
	}
	sub, _ := claims.GetSubject()
	exp, err := claims.GetExpirationTime()
	switch {
	case err != nil:
		c.r.add(Error, key, "exp claim: %v", err)
	case exp == nil:
		c.r.add(Info, key, "a token for role %q that does not expire", sub)
	case !exp.After(c.now):
		c.r.add(Error, key, "the token for role %q expired at %s", sub, exp.UTC().Format(time.RFC3339))
	case exp.Sub(c.now) < ExpiryWarning:
		c.r.add(Warning, key, "the token for role %q expires at %s, in %s", sub, exp.UTC().Format(time.RFC3339), days(exp.Sub(c.now)))
	default:
		c.r.add(Info, key, "a token for role %q, valid until %s", sub, exp.UTC().Format(time.RFC3339))
	}
}

// policy parses the authorization policy as the proxy's policy store does.
func (c checker) policy(cfg *config.Config) {
	f := cfg.Authz.PolicyFile
	if f == "" {
		return
	}
	b, err := os.ReadFile(f)
	if err != nil {
		c.r.add(Error, "authz.policyFile", "%v", err)
		return
	}
	if _, err := authz.ParsePolicy(b); err != nil {
		c.r.add(Error, "authz.policyFile", "%s: %v", f, err)
		return
	}
	c.r.add(Info, "authz.policyFile", "%s parses", f)
}

// certificate reports the dates of the leaf certificate in certFile (whose key the loaders
// above already matched).
func (c checker) certificate(key, certFile, keyFile string) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		c.r.add(Error, key, "%v", err)
		return
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		c.r.add(Error, key, "%s: %v", certFile, err)
		return
	}
	c.validity(key, certFile, leaf)
}

func (c checker) validity(key, file string, cert *x509.Certificate) {
	name := cert.Subject.String()
	switch left := cert.NotAfter.Sub(c.now); {
	case c.now.Before(cert.NotBefore):
		c.r.add(Error, key, "%s: %q is not valid before %s", file, name, cert.NotBefore.UTC().Format(time.RFC3339))
	case left <= 0:
		c.r.add(Error, key, "%s: %q expired at %s", file, name, cert.NotAfter.UTC().Format(time.RFC3339))
	case left < ExpiryWarning:
		c.r.add(Warning, key, "%s: %q expires at %s, in %s", file, name, cert.NotAfter.UTC().Format(time.RFC3339), days(left))
	default:
		c.r.add(Info, key, "%s: %q valid until %s", file, name, cert.NotAfter.UTC().Format(time.RFC3339))
	}
}

// caBundle checks that file holds PEM certificates and reports expired ones.
func (c checker) caBundle(key, file string) {
	b, err := os.ReadFile(file)
	if err != nil {
		c.r.add(Error, key, "%v", err)
		return
	}
	var certs []*x509.Certificate
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			c.r.add(Error, key, "%s: %v", file, err)
			return
		}
		certs = append(certs, cert)
	}
	if len(certs) == 0 {
		c.r.add(Error, key, "%s: no PEM certificate", file)
		return
	}
	for _, cert := range certs {
		c.validity(key, file, cert)
	}
}

func days(d time.Duration) string {
	if d < 48*time.Hour {
		return d.Round(time.Minute).String()
	}
	return fmt.Sprintf("%d days", int(d.Hours()/24))
}

// errNoFile is the error of a command line without a configuration file.
var errNoFile = errors.New("check-config needs the configuration file: pulsar-proxy check-config [--connect] FILE")
