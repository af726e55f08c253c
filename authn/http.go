package authn

import (
	"crypto/x509"
	"encoding/base64"
	"net/http"
	"strings"
)

// HeaderAuthMethod is the header in which Pulsar's HTTP clients (the admin client, the
// WebSocket clients) name their auth method.
const HeaderAuthMethod = "X-Pulsar-Auth-Method-Name"

// HTTPCredentials reads what a client presented on an HTTP request: a bearer token (method
// "token"), a user and password (Basic, method "basic"), a verified client certificate of an
// HTTPS listener (method "tls"), or nothing.
// X-Pulsar-Auth-Method-Name, which Pulsar's HTTP clients send, picks between them when a
// request carries several; an Authorization of another scheme names that scheme as the
// method, which the authenticator refuses as not enabled.
func HTTPCredentials(r *http.Request) Credentials {
	method := strings.ToLower(strings.TrimSpace(r.Header.Get(HeaderAuthMethod)))
	var token string
	var scheme string
	var basic []byte // user:password of a Basic header, decoded
	if h := r.Header.Get("Authorization"); h != "" {
		s, rest, _ := strings.Cut(strings.TrimSpace(h), " ")
		scheme = strings.ToLower(s)
		switch scheme {
		case "bearer":
			token = strings.TrimSpace(rest)
		case "basic":
			basic = basicCredentials(h)
		}
	}
	var certs []*x509.Certificate
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		certs = r.TLS.PeerCertificates
	}
	switch {
	case method == "token" || (method == "" && token != ""):
		return Credentials{Method: "token", Data: []byte(token)}
	case method == "basic" || (method == "" && scheme == "basic"):
		return Credentials{Method: "basic", Data: basic}
	case method == "tls" || (method == "" && scheme == "" && certs != nil):
		return Credentials{Method: "tls", PeerCertificates: certs}
	case method != "":
		return Credentials{Method: method}
	case scheme != "":
		return Credentials{Method: scheme}
	}
	return Credentials{}
}

// basicCredentials decodes an Authorization header of the Basic scheme as Pulsar's
// AuthenticationProviderBasic does: exactly "Basic <base64>", split on single spaces;
// anything else gives no credentials (refused as malformed).
func basicCredentials(h string) []byte {
	parts := strings.Split(h, " ")
	if len(parts) != 2 || !strings.EqualFold(parts[0], "basic") {
		return nil
	}
	b, err := base64.StdEncoding.DecodeString(parts[1])
	if err != nil {
		return nil
	}
	return b
}
