package proxy

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/pulsar-proxy/pulsar-proxy/authn"
	"github.com/pulsar-proxy/pulsar-proxy/authz"
	"github.com/pulsar-proxy/pulsar-proxy/edge"
	"github.com/pulsar-proxy/pulsar-proxy/internal/config"
	"github.com/pulsar-proxy/pulsar-proxy/session"
)

// reloading are the parts of security that run in the background: the identity provider's
// key set (nil without auth.token.jwksURL) and the basic credentials file (nil without
// auth.basic.credentialsFile).
type reloading struct {
	jwks  *authn.JWKS
	basic *authn.BasicProvider
}

// newSecurity builds authentication, the policy store, what of them reloads in the
// background (Run runs it) and the proxy's broker credentials from the configuration.
func newSecurity(cfg *config.Config, reg prometheus.Registerer, log zerolog.Logger, refusals edge.Refusals) (session.Security, *authz.PolicyStore, reloading, error) {
	sec, bg, err := newAuthentication(cfg, reg, log)
	policyMetrics := authz.NewMetrics(reg)
	if err != nil || !cfg.Authz.Enabled {
		sec.Edge = edge.New(edge.Config{Metrics: policyMetrics, Refusals: refusals})
		return sec, nil, bg, err
	}
	store, err := authz.NewPolicyStore(cfg.Authz.PolicyFile, policyMetrics, log)
	if err != nil {
		return sec, nil, reloading{}, fmt.Errorf("authz.policyFile: %w", err)
	}
	sec.Edge = edge.New(edge.Config{Policy: store, Metrics: policyMetrics, Refusals: refusals})
	return sec, store, bg, nil
}

// newAuthentication builds the client authenticator (nil when auth is off) and the proxy's
// own broker credentials.
func newAuthentication(cfg *config.Config, reg prometheus.Registerer, log zerolog.Logger) (session.Security, reloading, error) {
	sec := session.Security{
		Metrics:                  authn.NewMetrics(reg),
		ForwardClientCredentials: cfg.Auth.ForwardClientCredentials,
		RefreshTimeout:           cfg.Auth.RefreshTimeout,
	}
	var bg reloading
	if !cfg.Auth.Enabled {
		return sec, bg, nil
	}
	var providers []authn.Provider
	if t := cfg.Auth.Token; t.SecretKeyFile != "" || t.PublicKeyFile != "" || t.JWKSURL != "" {
		tc, keys, err := tokenConfig(t, reg, log)
		if err != nil {
			return sec, bg, err
		}
		tp, err := authn.NewTokenProvider(tc)
		if err != nil {
			return sec, bg, fmt.Errorf("auth.token: %w", err)
		}
		providers, bg.jwks = append(providers, tp), keys
	}
	if f := cfg.Auth.Basic.CredentialsFile; f != "" {
		bp, err := authn.NewBasicProvider(f, authn.NewBasicMetrics(reg), log)
		if err != nil {
			return sec, bg, fmt.Errorf("auth.basic.credentialsFile: %w", err)
		}
		providers, bg.basic = append(providers, bp), bp
	}
	if (cfg.Listen.PulsarTLS != "" || cfg.Admin.ListenHTTPS != "") && cfg.TLS.ClientCAFile != "" {
		// Verified client certificates can name a role: the "tls" method.
		roleOf, err := authn.CertificateRole(cfg.Auth.ClientCert.RoleFrom, cfg.Auth.ClientCert.URIPrefix)
		if err != nil {
			return sec, bg, fmt.Errorf("auth.tls.roleFrom: %w", err)
		}
		providers = append(providers, authn.TLSProvider{Role: roleOf})
	}
	sec.Authenticator = authn.NewAuthenticator(cfg.Auth.AnonymousRole, providers...)
	return sec, bg, nil
}

// tokenConfig reads the token keys: a static key file, or the identity provider's key set.
func tokenConfig(t config.AuthToken, reg prometheus.Registerer, log zerolog.Logger) (authn.TokenConfig, *authn.JWKS, error) {
	tc := authn.TokenConfig{RoleClaim: t.RoleClaim, Leeway: t.Leeway, Audience: t.Audience, Issuers: t.Issuers}
	var err error
	if t.JWKSURL != "" {
		tc.JWKS, err = authn.NewJWKS(authn.JWKSConfig{
			URL: t.JWKSURL, RefreshInterval: t.JWKSRefreshInterval, MinRefetchInterval: t.JWKSMinRefetchInterval,
			Timeout: t.JWKSTimeout, CAFile: t.JWKSCAFile,
		}, authn.NewJWKSMetrics(reg), log)
		if err != nil {
			return tc, nil, fmt.Errorf("auth.token.jwksURL: %w", err)
		}
		return tc, tc.JWKS, nil
	}
	if f := t.SecretKeyFile; f != "" {
		if tc.SecretKey, err = authn.ReadSecretKey(f); err != nil {
			return tc, nil, fmt.Errorf("auth.token.secretKeyFile: %w", err)
		}
	}
	if f := t.PublicKeyFile; f != "" {
		if tc.PublicKey, err = authn.ReadPublicKey(f); err != nil {
			return tc, nil, fmt.Errorf("auth.token.publicKeyFile: %w", err)
		}
	}
	return tc, nil, nil
}

// proxyCredentials are the proxy's own credentials for brokers (auth.brokerClient), read on
// every use so a rotated token file is picked up; nil without any.
func proxyCredentials(cfg *config.Config) (func() (string, []byte, error), error) {
	bc := cfg.Auth.BrokerClient
	if bc.Token == "" && bc.TokenFile == "" {
		return nil, nil
	}
	creds := authn.TokenCredentials(bc.Token, bc.TokenFile)
	if _, _, err := creds(); err != nil {
		return nil, fmt.Errorf("auth.brokerClient.tokenFile: %w", err)
	}
	return creds, nil
}
