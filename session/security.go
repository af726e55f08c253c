package session

import (
	"context"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/authz"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/upstream"
)

// Authenticator decides who a client is from the credentials it presents.
type Authenticator interface {
	Authenticate(authz.Credentials) (authz.Identity, error)
}

// PolicySource returns the authorization policy in force (it may change between calls).
type PolicySource interface {
	Policy() *authz.Policy
}

// Security is what sessions need to authenticate clients, authorize their commands and
// speak for them to brokers. The zero value: no authentication, no authorization, no
// proxy credentials.
type Security struct {
	Authenticator Authenticator // nil: clients are not authenticated and have no role
	Policy        PolicySource  // nil: the proxy authorizes nothing itself
	Metrics       *authz.Metrics

	// ForwardClientCredentials also sends original_auth_method/original_auth_data, for
	// brokers that authenticate them (authenticateOriginalAuthData=true).
	ForwardClientCredentials bool
	// RefreshTimeout is how long a client has to answer the proxy's AUTH_CHALLENGE when its
	// credentials expire.
	RefreshTimeout time.Duration
}

// InspectsFrames reports whether direct sessions must read the client's frames (to check
// PRODUCER and SUBSCRIBE, to renew credentials), so they cannot be forwarded unframed.
func (sec Security) InspectsFrames() bool { return sec.Authenticator != nil || sec.Policy != nil }

// SetSecurity configures authentication and authorization; call it before Serve.
func (s *Server) SetSecurity(sec Security) {
	if sec.RefreshTimeout <= 0 {
		sec.RefreshTimeout = 10 * time.Second
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
	creds := authz.Credentials{Method: c.GetAuthMethodName(), Data: c.GetAuthData()}
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
	reason := authz.ReasonOf(err)
	if reason == "" {
		reason = authz.ReasonMalformed
	}
	s.srv.sec.Metrics.AuthFailure(method, reason)
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

// lookupContext says whom lookups are made for at the brokers.
func (s *session) lookupContext() context.Context {
	c := s.brokerClient()
	if c.Principal == "" {
		return s.ctx
	}
	return upstream.WithClient(s.ctx, c)
}

// allowed asks the policy in force; without a policy everything is allowed.
func (s *session) allowed(a authz.Action, topic string) bool {
	if s.srv.sec.Policy == nil {
		return true
	}
	p := s.srv.sec.Policy.Policy()
	s.mu.Lock()
	role := s.identity.Role
	s.mu.Unlock()
	if p.Allowed(role, a, topic) {
		return true
	}
	s.srv.sec.Metrics.Denied(a)
	s.with(s.srv.log.Debug()).Str("action", string(a)).Str("topic", topic).Msg("denied by policy")
	return false
}

func denyMessage(role string, a authz.Action, topic string) string {
	return "pulsar-proxy: role " + quoteRole(role) + " may not " + string(a) + " " + topic
}

func quoteRole(r string) string {
	if r == "" {
		return "(anonymous)"
	}
	return strings.ReplaceAll(r, "\n", " ")
}

// filterTopics keeps the topics of a GET_TOPICS_OF_NAMESPACE answer the role may look up.
func (s *session) filterTopics(resp *pb.BaseCommand) {
	r := resp.GetGetTopicsOfNamespaceResponse()
	if r == nil || s.srv.sec.Policy == nil {
		return
	}
	p := s.srv.sec.Policy.Policy()
	s.mu.Lock()
	role := s.identity.Role
	s.mu.Unlock()
	if p.IsSuperUser(role) {
		return
	}
	kept := r.Topics[:0]
	for _, t := range r.Topics {
		if p.Allowed(role, authz.ActionLookup, t) {
			kept = append(kept, t)
		}
	}
	if len(kept) != len(r.Topics) {
		// The broker's hash covers the full list: the client must hold the hash of its own.
		r.TopicsHash = proto.String(topicsHash(kept))
		r.Changed = proto.Bool(true)
	}
	r.Topics = kept
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
	limitRoleLookupRate  = "role_lookup_rate"
	limitLookupsInFlight = "lookups_in_flight"
)

// policy is the authorization policy in force; nil without one.
func (s *session) policy() *authz.Policy {
	if s.srv.sec.Policy == nil {
		return nil
	}
	return s.srv.sec.Policy.Policy()
}

// acquireRole counts the session against its role's connection limit (see authz.Limit).
func (s *session) acquireRole() (release func(), ok bool) {
	role, p := s.role(), s.policy()
	if role == "" || p == nil {
		return func() {}, true
	}
	return s.srv.roles.acquire(role, p)
}

// lookupAllowed takes a token of the role's lookup rate.
func (s *session) lookupAllowed() bool {
	role, p := s.role(), s.policy()
	if role == "" || p == nil {
		return true
	}
	return s.srv.roles.allowLookup(role, p)
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
