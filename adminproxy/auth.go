package adminproxy

import (
	"crypto/x509"
	"net/http"
	"strings"

	"github.com/pulsar-proxy/pulsar-proxy/authn"
)

// Header names Pulsar brokers read on their web service (PulsarWebResource and
// AuthenticationFilter in pulsar-broker 4.0): a request authenticated with a role in the
// broker's proxyRoles is decided for the role named in X-Original-Principal (which the proxy's
// role must then be allowed too); a request of any other role may only name itself there.
const (
	headerOriginalPrincipal = "X-Original-Principal"
	headerAuthMethod        = "X-Pulsar-Auth-Method-Name"
)

// credentials reads what a client presented on an HTTP request: a bearer token (method
// "token"), a verified client certificate of the HTTPS listener (method "tls"), or nothing.
// X-Pulsar-Auth-Method-Name, which Pulsar's admin client sends, picks between them when a
// request carries both; an Authorization of another scheme (Basic, ...) names that scheme as
// the method, which the authenticator refuses as not enabled.
func credentials(r *http.Request) authn.Credentials {
	method := strings.ToLower(strings.TrimSpace(r.Header.Get(headerAuthMethod)))
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
		return authn.Credentials{Method: "token", Data: []byte(token)}
	case method == "tls" || (method == "" && scheme == "" && certs != nil):
		return authn.Credentials{Method: "tls", PeerCertificates: certs}
	case method != "":
		return authn.Credentials{Method: method}
	case scheme != "":
		return authn.Credentials{Method: scheme}
	}
	return authn.Credentials{}
}
