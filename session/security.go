package session

import (
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/authn"
	"github.com/pulsar-proxy/pulsar-proxy/authz"
	"github.com/pulsar-proxy/pulsar-proxy/edge"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/upstream"
)

// Authenticator decides who a client is from the credentials it presents.
type Authenticator interface {
	Authenticate(authn.Credentials) (authn.Identity, error)
}

// Security is what sessions need to authenticate clients, authorize their commands and
// speak for them to brokers. The zero value: no authentication, no authorization, no
// proxy credentials.
type Security struct {
	Authenticator Authenticator // nil: clients are not authenticated and have no role
	// Edge decides what clients may do, on every plane (nil: an edge without a policy or
	// metrics, which still reads commands strictly where it must).
	Edge *edge.Edge
	// Metrics counts refused authentications and credential renewals (nil: not counted).
	Metrics *authn.Metrics

	// ForwardClientCredentials also sends original_auth_method/original_auth_data, for
	// brokers that authenticate them (authenticateOriginalAuthData=true).
	ForwardClientCredentials bool
	// RefreshTimeout is how long a client has to answer the proxy's AUTH_CHALLENGE when its
	// credentials expire.
	RefreshTimeout time.Duration
}

// InspectsFrames reports whether direct sessions must read the client's frames (to check
// PRODUCER and SUBSCRIBE, to renew credentials), so they cannot be forwarded unframed.
func (sec Security) InspectsFrames() bool { return sec.Authenticator != nil || sec.Edge.Policed() }

// SetSecurity configures authentication and authorization; call it before Serve.
func (s *Server) SetSecurity(sec Security) {
	if sec.RefreshTimeout <= 0 {
		sec.RefreshTimeout = 10 * time.Second
	}
	if sec.Edge == nil {
		sec.Edge = edge.New(edge.Config{})
	}
	s.sec = sec
}

// refreshData is the challenge payload Pulsar uses to ask for fresh credentials.
var refreshData = []byte("PulsarAuthRefresh")

// authenticate checks the client's CONNECT credentials. On refusal the client has been told
// why with AuthenticationError.
func (s *session) authenticate(c *pb.CommandConnect) bool {
	auth := s.srv.sec.Authenticator
	if auth == nil {
		return true
	}
	creds := authn.Credentials{Method: c.GetAuthMethodName(), Data: c.GetAuthData()}
	if creds.Method == "" && c.AuthMethod != nil && len(creds.Data) > 0 {
		creds.Method = "unknown" // only the deprecated enum field: not a method we serve
	}
	if creds.Method == "tls" {
		creds.PeerCertificates = s.peerCertificates()
	}
	id, err := auth.Authenticate(creds)
	if err != nil {
		s.authFailed(creds.Method, err)
		return false
	}
	s.mu.Lock()
	s.identity = id
	s.clientCreds = creds
	s.mu.Unlock()
	return true
}

func (s *session) authFailed(method string, err error) {
	if method == "" {
		method = "none"
	}
	reason := authn.ReasonOf(err)
	if reason == "" {
		reason = authn.ReasonMalformed
	}
	s.srv.sec.Metrics.AuthFailure(method, reason)
	s.authReason = reason
	s.sendError(0, pb.ServerError_AuthenticationError, "pulsar-proxy: "+err.Error())
}

// brokerClient is whom the proxy speaks for at brokers, for this client: its role, and its
// own credentials where the proxy forwards them (forwardClientCredentials).
func (s *session) brokerClient() upstream.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := upstream.Client{Principal: s.identity.Role}
	if s.srv.sec.ForwardClientCredentials && s.clientCreds.Method != "" {
		c.AuthMethod, c.AuthData, c.Expires = s.clientCreds.Method, s.clientCreds.Data, s.identity.Expires
	}
	return c
}

// identity is who the client is now (renewed on refresh).
func (s *session) identityNow() authn.Identity {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.identity
}

func (s *session) role() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.identity.Role
}

// expireCredentials ends a session whose client did not renew its credentials.
func (s *session) expireCredentials() { s.close(ReasonAuthExpired) }

// The limits the policy sets and the proxy's own bounds, as metric labels.
const (
	limitRoleConnections = "role_connections"
	limitRoleLookupRate  = "role_lookup_rate" // counted where the edge refuses a lookup over the rate
	limitLookupsInFlight = "lookups_in_flight"
)

// topicLists are the client's topic lists, filtered by the edge, their watchers counted.
func (s *session) topicLists() *edge.TopicLists {
	return s.srv.sec.Edge.TopicLists(s.identityNow).Counted(s.srv.metrics.watchers)
}

// policy is the authorization policy in force; nil without one.
func (s *session) policy() *authz.Policy { return s.srv.sec.Edge.Policy() }

// acquireRole counts the session against its role's connection limit (see authz.Limit).
func (s *session) acquireRole() (release func(), ok bool) {
	role, p := s.role(), s.policy()
	if role == "" || p == nil {
		return func() {}, true
	}
	return s.srv.roles.acquire(role, p)
}

// pacePublishing waits, after the client sent n bytes to its broker, as long as its role's
// publish rate asks: meanwhile nothing is read from the client, whose sends slow down.
func (s *session) pacePublishing(n int) {
	role, p := s.role(), s.policy()
	if role == "" || p == nil {
		return
	}
	if l := s.srv.roles.pacer(role, p); l != nil {
		s.srv.metrics.publishPaused.Add(pace(s.ctx, l, n).Seconds())
	}
}

// countRefusal counts, beside the edge's own denial count, a refusal over a role's limit.
func (s *session) countRefusal(d edge.Decision) {
	if d.Reason == edge.ReasonRateLimited {
		s.srv.metrics.limited.WithLabelValues(limitRoleLookupRate).Inc()
	}
}
