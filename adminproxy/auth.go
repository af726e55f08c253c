package adminproxy

import (
	"crypto/x509"
	"encoding/base64"
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
// "token"), a user and password (Basic, method "basic"), a verified client certificate of the
// HTTPS listener (method "tls"), or nothing.
// X-Pulsar-Auth-Method-Name, which Pulsar's admin client sends, picks between them when a
// request carries several; an Authorization of another scheme names that scheme as the
// method, which the authenticator refuses as not enabled.
func credentials(r *http.Request) authn.Credentials {
	method := strings.ToLower(strings.TrimSpace(r.Header.Get(headerAuthMethod)))
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
		return authn.Credentials{Method: "token", Data: []byte(token)}
	case method == "basic" || (method == "" && scheme == "basic"):
		return authn.Credentials{Method: "basic", Data: basic}
	case method == "tls" || (method == "" && scheme == "" && certs != nil):
		return authn.Credentials{Method: "tls", PeerCertificates: certs}
	case method != "":
		return authn.Credentials{Method: method}
	case scheme != "":
		return authn.Credentials{Method: scheme}
	}
	return authn.Credentials{}
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
