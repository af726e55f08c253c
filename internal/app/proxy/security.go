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

// newSecurity builds authentication, the policy store, the identity provider's key set (nil
// without auth.token.jwksURL; main runs it) and the proxy's broker credentials from the
// configuration.
func newSecurity(cfg *config.Config, reg prometheus.Registerer, log zerolog.Logger, refusals edge.Refusals) (session.Security, *authz.PolicyStore, *authn.JWKS, error) {
	sec, jwks, err := newAuthentication(cfg, reg, log)
	policyMetrics := authz.NewMetrics(reg)
	if err != nil || !cfg.Authz.Enabled {
		sec.Edge = edge.New(edge.Config{Metrics: policyMetrics, Refusals: refusals})
		return sec, nil, jwks, err
	}
	store, err := authz.NewPolicyStore(cfg.Authz.PolicyFile, policyMetrics, log)
	if err != nil {
		return sec, nil, nil, fmt.Errorf("authz.policyFile: %w", err)
	}
	sec.Edge = edge.New(edge.Config{Policy: store, Metrics: policyMetrics, Refusals: refusals})
	return sec, store, jwks, nil
}

// newAuthentication builds the client authenticator (nil when auth is off) and the proxy's
// own broker credentials.
func newAuthentication(cfg *config.Config, reg prometheus.Registerer, log zerolog.Logger) (session.Security, *authn.JWKS, error) {
	sec := session.Security{
		Metrics:                  authn.NewMetrics(reg),
		ForwardClientCredentials: cfg.Auth.ForwardClientCredentials,
		RefreshTimeout:           cfg.Auth.RefreshTimeout,
	}
	if !cfg.Auth.Enabled {
		return sec, nil, nil
	}
	tc, jwks, err := tokenConfig(cfg.Auth.Token, reg, log)
	if err != nil {
		return sec, nil, err
	}
	tp, err := authn.NewTokenProvider(tc)
	if err != nil {
		return sec, nil, fmt.Errorf("auth.token: %w", err)
	}
	providers := []authn.Provider{tp}
	if (cfg.Listen.PulsarTLS != "" || cfg.Admin.ListenHTTPS != "") && cfg.TLS.ClientCAFile != "" {
		// Verified client certificates can name a role: the "tls" method.
		roleOf, err := authn.CertificateRole(cfg.Auth.ClientCert.RoleFrom, cfg.Auth.ClientCert.URIPrefix)
		if err != nil {
			return sec, nil, fmt.Errorf("auth.tls.roleFrom: %w", err)
		}
		providers = append(providers, authn.TLSProvider{Role: roleOf})
	}
	sec.Authenticator = authn.NewAuthenticator(cfg.Auth.AnonymousRole, providers...)
	return sec, jwks, nil
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
