// Package authn decides who a client is: the authentication providers (token, with a static
// key or the identity provider's key set; tls, from a verified client certificate; anonymous)
// chosen by the CONNECT's auth_method_name, and the proxy's own token for brokers. What that
// role may do is package authz's.
package authn

import (
	"crypto/x509"
	"errors"
	"fmt"
	"time"
)

// Identity is an authenticated client.
type Identity struct {
	Role    string
	Method  string    // the provider that accepted it: "token", "tls", "anonymous"
	Expires time.Time // zero: never (anonymous, certificates checked at handshake)
}

// Expired reports whether the identity's credentials have run out at now.
func (i Identity) Expired(now time.Time) bool {
	return !i.Expires.IsZero() && !now.Before(i.Expires)
}

// Reason is why authentication failed: a metric label, so the set is fixed and small.
type Reason string

const (
	ReasonExpired        Reason = "expired"
	ReasonNotYetValid    Reason = "not_yet_valid"
	ReasonBadSignature   Reason = "bad_signature"
	ReasonMalformed      Reason = "malformed"
	ReasonBadAudience    Reason = "bad_audience"
	ReasonBadIssuer      Reason = "bad_issuer"
	ReasonUnknownKey     Reason = "unknown_key" // no key of the token's kid (JWKS)
	ReasonNoRole         Reason = "no_role"
	ReasonNoCredentials  Reason = "no_credentials"
	ReasonUnknownMethod  Reason = "unknown_method"
	ReasonNoCertificate  Reason = "no_certificate"
	ReasonRefreshTimeout Reason = "refresh_timeout"
)

// Error is a refused authentication; its message is meant for the client.
type Error struct {
	Method string
	Reason Reason
	Detail string
}

func (e *Error) Error() string {
	if e.Detail == "" {
		return fmt.Sprintf("authentication failed (%s): %s", e.Method, e.Reason)
	}
	return fmt.Sprintf("authentication failed (%s): %s: %s", e.Method, e.Reason, e.Detail)
}

// ReasonOf extracts the Reason of an authentication error ("" for other errors).
func ReasonOf(err error) Reason {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

// Credentials are what a client presented at CONNECT (or in an AUTH_RESPONSE).
type Credentials struct {
	Method string // auth_method_name; "" when the client sent none
	Data   []byte // auth_data
	// PeerCertificates are the verified client certificates of a TLS connection (nil on
	// plain TCP).
	PeerCertificates []*x509.Certificate
}

// Provider authenticates one auth method.
type Provider interface {
	Method() string
	Authenticate(c Credentials) (Identity, error)
}

// Authenticator picks the provider named by the client's method. With no credentials at all
// the client gets AnonymousRole, or is refused when that is empty.
type Authenticator struct {
	providers     map[string]Provider
	anonymousRole string
}

// NewAuthenticator builds an authenticator over the given providers.
func NewAuthenticator(anonymousRole string, providers ...Provider) *Authenticator {
	a := &Authenticator{providers: map[string]Provider{}, anonymousRole: anonymousRole}
	for _, p := range providers {
		a.providers[p.Method()] = p
	}
	return a
}

// Authenticate returns the client's identity or an *Error saying why not.
func (a *Authenticator) Authenticate(c Credentials) (Identity, error) {
	if c.Method == "" || c.Method == "none" {
		if len(c.Data) == 0 && a.anonymousRole != "" {
			return Identity{Role: a.anonymousRole, Method: "anonymous"}, nil
		}
		if len(c.Data) == 0 {
			return Identity{}, &Error{Method: "none", Reason: ReasonNoCredentials, Detail: "this proxy requires credentials"}
		}
		return Identity{}, &Error{Method: "none", Reason: ReasonUnknownMethod, Detail: "credentials sent without auth_method_name"}
	}
	p, ok := a.providers[c.Method]
	if !ok {
		return Identity{}, &Error{Method: c.Method, Reason: ReasonUnknownMethod, Detail: fmt.Sprintf("auth method %q is not enabled on this proxy", c.Method)}
	}
	return p.Authenticate(c)
}

// CertificateRoleFunc names the role of a verified client certificate.
type CertificateRoleFunc func(*x509.Certificate) (string, error)

// TLSProvider takes the role from the verified client certificate of a TLS connection.
// The certificate was verified by the TLS handshake; this only names the role.
type TLSProvider struct {
	Role CertificateRoleFunc // nil: the certificate's subject common name
}

// Method is "tls", as Pulsar clients name it.
func (TLSProvider) Method() string { return "tls" }

// Authenticate names the role of the leaf certificate.
func (p TLSProvider) Authenticate(c Credentials) (Identity, error) {
	if len(c.PeerCertificates) == 0 {
		return Identity{}, &Error{Method: "tls", Reason: ReasonNoCertificate, Detail: "no verified client certificate on this connection"}
	}
	roleOf := p.Role
	if roleOf == nil {
		roleOf = roleFromCN
	}
	role, err := roleOf(c.PeerCertificates[0])
	if err != nil {
		return Identity{}, &Error{Method: "tls", Reason: ReasonNoRole, Detail: err.Error()}
	}
	if role == "" {
		return Identity{}, &Error{Method: "tls", Reason: ReasonNoRole, Detail: "client certificate names no role"}
	}
	return Identity{Role: role, Method: "tls"}, nil
}
