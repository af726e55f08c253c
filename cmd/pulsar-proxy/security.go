package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/pulsar-proxy/pulsar-proxy/authz"
	"github.com/pulsar-proxy/pulsar-proxy/config"
	"github.com/pulsar-proxy/pulsar-proxy/session"
)

// newSecurity builds authentication, the policy store and the proxy's broker credentials
// from the configuration.
func newSecurity(cfg *config.Config, reg prometheus.Registerer, log zerolog.Logger) (session.Security, *authz.PolicyStore, error) {
	m := authz.NewMetrics(reg)
	sec := session.Security{
		Metrics:                  m,
		DefaultPrincipal:         cfg.Auth.BrokerClient.OwnPrincipal,
		ForwardClientCredentials: cfg.Auth.ForwardClientCredentials,
		RefreshTimeout:           cfg.Auth.RefreshTimeout,
	}
	if bc := cfg.Auth.BrokerClient; bc.Token != "" || bc.TokenFile != "" {
		sec.ProxyCredentials = func() (string, []byte, error) {
			if bc.TokenFile == "" {
				return authz.MethodToken, []byte(bc.Token), nil
			}
			b, err := os.ReadFile(bc.TokenFile)
			if err != nil {
				return "", nil, fmt.Errorf("auth.brokerClient.tokenFile: %w", err)
			}
			return authz.MethodToken, []byte(strings.TrimSpace(string(b))), nil
		}
		if _, _, err := sec.ProxyCredentials(); err != nil {
			return sec, nil, err
		}
	}
	if cfg.Auth.Enabled {
		tc := authz.TokenConfig{RoleClaim: cfg.Auth.Token.RoleClaim, Leeway: cfg.Auth.Token.Leeway, Audience: cfg.Auth.Token.Audience}
		var err error
		if f := cfg.Auth.Token.SecretKeyFile; f != "" {
			if tc.SecretKey, err = authz.ReadSecretKey(f); err != nil {
				return sec, nil, fmt.Errorf("auth.token.secretKeyFile: %w", err)
			}
		}
		if f := cfg.Auth.Token.PublicKeyFile; f != "" {
			if tc.PublicKey, err = authz.ReadPublicKey(f); err != nil {
				return sec, nil, fmt.Errorf("auth.token.publicKeyFile: %w", err)
			}
		}
		tp, err := authz.NewTokenProvider(tc)
		if err != nil {
			return sec, nil, fmt.Errorf("auth.token: %w", err)
		}
		providers := []authz.Provider{tp}
		if cfg.Listen.PulsarTLS != "" && cfg.TLS.ClientCAFile != "" {
			// Verified client certificates can name a role: the "tls" method.
			roleOf, err := authz.CertificateRole(cfg.Auth.ClientCert.RoleFrom, cfg.Auth.ClientCert.URIPrefix)
			if err != nil {
				return sec, nil, fmt.Errorf("auth.tls.roleFrom: %w", err)
			}
			providers = append(providers, authz.TLSProvider{Role: roleOf})
		}
		sec.Authenticator = authz.NewAuthenticator(cfg.Auth.AnonymousRole, providers...)
	}
	if !cfg.Authz.PolicyEnabled {
		return sec, nil, nil
	}
	store, err := authz.NewPolicyStore(cfg.Authz.PolicyFile, m, log)
	if err != nil {
		return sec, nil, fmt.Errorf("authz.policyFile: %w", err)
	}
	sec.Policy = store
	return sec, store, nil
}
