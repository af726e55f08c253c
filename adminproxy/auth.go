package adminproxy

import (
	"net/http"

	"github.com/pulsar-proxy/pulsar-proxy/authn"
)

// Header names Pulsar brokers read on their web service (PulsarWebResource and
// AuthenticationFilter in pulsar-broker 4.0): a request authenticated with a role in the
// broker's proxyRoles is decided for the role named in X-Original-Principal (which the proxy's
// role must then be allowed too); a request of any other role may only name itself there.
const (
	headerOriginalPrincipal = "X-Original-Principal"
	headerAuthMethod        = authn.HeaderAuthMethod
)

// credentials reads what a client presented on an HTTP request (authn.HTTPCredentials).
func credentials(r *http.Request) authn.Credentials { return authn.HTTPCredentials(r) }
