package authn

import (
	"crypto/x509"
	"net/http"
	"strings"
)

// HeaderAuthMethod is the header in which Pulsar's HTTP clients (the admin client, the
// WebSocket clients) name their auth method.
const HeaderAuthMethod = "X-Pulsar-Auth-Method-Name"

// HTTPCredentials reads what a client presented on an HTTP request: a bearer token (method
// "token"), a verified client certificate of an HTTPS listener (method "tls"), or nothing.
// X-Pulsar-Auth-Method-Name picks between them when a request carries both; an
// Authorization of another scheme (Basic, ...) names that scheme as the method, which the
// authenticator refuses as not enabled.
func HTTPCredentials(r *http.Request) Credentials {
	method := strings.ToLower(strings.TrimSpace(r.Header.Get(HeaderAuthMethod)))
	var token string
	var scheme string
	if h := r.Header.Get("Authorization"); h != "" {
		s, rest, _ := strings.Cut(strings.TrimSpace(h), " ")
		scheme = strings.ToLower(s)
		if scheme == "bearer" {
			token = strings.TrimSpace(rest)
		}
	}
	var certs []*x509.Certificate
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		certs = r.TLS.PeerCertificates
	}
	switch {
	case method == "token" || (method == "" && token != ""):
		return Credentials{Method: "token", Data: []byte(token)}
	case method == "tls" || (method == "" && scheme == "" && certs != nil):
		return Credentials{Method: "tls", PeerCertificates: certs}
	case method != "":
		return Credentials{Method: method}
	case scheme != "":
		return Credentials{Method: scheme}
	}
	return Credentials{}
}
