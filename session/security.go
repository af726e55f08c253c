package session

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/authz"
	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/lookup"
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

	// ProxyCredentials are the proxy's own, sent in every broker CONNECT.
	ProxyCredentials func() (method string, data []byte, err error)
	// DefaultPrincipal is the original_principal for a client without a role (authentication
	// off), since brokers refuse a proxy role without one.
	DefaultPrincipal string
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

// lookupContext says whom lookups are made for at the brokers.
func (s *session) lookupContext() context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.identity.Role == "" {
		return s.ctx
	}
	if s.srv.sec.ForwardClientCredentials && s.clientCreds.Method != "" {
		return lookup.WithClient(s.ctx, lookup.ClientIdentity{Principal: s.identity.Role,
			AuthMethod: s.clientCreds.Method, AuthData: s.clientCreds.Data, Expires: s.identity.Expires})
	}
	return lookup.WithPrincipal(s.ctx, s.identity.Role)
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
	s.log.Debug().Str("action", string(a)).Str("topic", topic).Msg("denied by policy")
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
		// The broker's hash covers the full list; a stale hash would make a client skip updates.
		r.TopicsHash = nil
		r.Changed = proto.Bool(true)
	}
	r.Topics = kept
}

// refresher re-authenticates a client whose credentials expire during a session: at expiry
// the proxy sends AUTH_CHALLENGE and waits for an AUTH_RESPONSE that authenticates the same
// role. Broker-originated challenges are not its business: while the proxy has no challenge
// outstanding, AUTH_RESPONSEs go on to the broker.
type refresher struct {
	s         *session
	send      func(*pb.BaseCommand) error
	responses chan *pb.CommandAuthResponse

	mu      sync.Mutex
	pending bool
}

func (s *session) newRefresher(send func(*pb.BaseCommand) error) *refresher {
	return &refresher{s: s, send: send, responses: make(chan *pb.CommandAuthResponse, 1)}
}

// offer hands an AUTH_RESPONSE from the client over; it reports false when the proxy asked
// for none (it then belongs to the broker).
func (r *refresher) offer(resp *pb.CommandAuthResponse) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.pending {
		return false
	}
	r.pending = false
	r.responses <- resp
	return true
}

func (r *refresher) isPending() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pending
}

// errRefreshFailed ends a session whose credentials expired and were not renewed.
var errRefreshFailed = errors.New("credentials expired and not renewed")

// run waits for each expiry and challenges the client, until ctx ends (nil) or the client
// fails to renew (the client has been sent AuthenticationError).
func (r *refresher) run(ctx context.Context, supportsRefresh bool) error {
	s := r.s
	for {
		s.mu.Lock()
		id := s.identity
		s.mu.Unlock()
		if id.Expires.IsZero() {
			return nil
		}
		timer := time.NewTimer(time.Until(id.Expires))
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C:
		}
		if !supportsRefresh || s.srv.sec.Authenticator == nil {
			return r.fail(id.Method, &authz.Error{Method: id.Method, Reason: authz.ReasonExpired, Detail: "credentials expired and this client cannot refresh them"})
		}
		r.mu.Lock()
		r.pending = true
		r.mu.Unlock()
		challenge := &pb.BaseCommand{Type: pb.BaseCommand_AUTH_CHALLENGE.Enum(), AuthChallenge: &pb.CommandAuthChallenge{
			ServerVersion:   proto.String(s.srv.cfg.ServerVersion),
			Challenge:       &pb.AuthData{AuthMethodName: proto.String(id.Method), AuthData: refreshData},
			ProtocolVersion: proto.Int32(s.srv.cfg.ProtocolVersion),
		}}
		if err := r.send(challenge); err != nil {
			return nil // the session is ending anyway
		}
		wait := time.NewTimer(s.srv.sec.RefreshTimeout)
		var resp *pb.CommandAuthResponse
		select {
		case <-ctx.Done():
			wait.Stop()
			return nil
		case <-wait.C:
			return r.fail(id.Method, &authz.Error{Method: id.Method, Reason: authz.ReasonRefreshTimeout, Detail: "no answer to the credential refresh challenge"})
		case resp = <-r.responses:
			wait.Stop()
		}
		creds := authz.Credentials{Method: resp.GetResponse().GetAuthMethodName(), Data: resp.GetResponse().GetAuthData()}
		if creds.Method == "tls" {
			creds.PeerCertificates = s.peerCertificates()
		}
		fresh, err := s.srv.sec.Authenticator.Authenticate(creds)
		if err == nil && fresh.Role != id.Role {
			err = &authz.Error{Method: creds.Method, Reason: authz.ReasonNoRole, Detail: "refreshed credentials name role " + quoteRole(fresh.Role) + ", not " + quoteRole(id.Role)}
		}
		if err == nil && fresh.Expired(time.Now()) {
			err = &authz.Error{Method: creds.Method, Reason: authz.ReasonExpired, Detail: "refreshed credentials are already expired"}
		}
		if err != nil {
			return r.fail(creds.Method, err)
		}
		s.mu.Lock()
		s.identity = fresh
		s.clientCreds = creds
		s.mu.Unlock()
		s.srv.sec.Metrics.Refreshed(true)
		s.log.Debug().Time("expires", fresh.Expires).Msg("client credentials refreshed")
	}
}

func (r *refresher) fail(method string, err error) error {
	s := r.s
	if method == "" {
		method = "none"
	}
	reason := authz.ReasonOf(err)
	s.srv.sec.Metrics.AuthFailure(method, reason)
	s.srv.sec.Metrics.Refreshed(false)
	s.log.Debug().Err(err).Msg("closing session: credentials not renewed")
	r.send(frame.Error(0, pb.ServerError_AuthenticationError, "pulsar-proxy: "+err.Error()))
	return errRefreshFailed
}

func (s *session) role() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.identity.Role
}

// expireCredentials ends a session whose client did not renew its credentials.
func (s *session) expireCredentials() {
	s.mu.Lock()
	s.authExpired = true
	s.mu.Unlock()
	s.conn.Close()
}

// securityCommand names the client commands upstreamFilter acts on; all others stay in the
// pipe's write batches untouched.
func securityCommand(t pb.BaseCommand_Type) bool {
	return t == pb.BaseCommand_PRODUCER || t == pb.BaseCommand_SUBSCRIBE || t == pb.BaseCommand_AUTH_RESPONSE
}

// upstreamFilter looks at the client's commands in direct mode. Only PRODUCER, SUBSCRIBE and
// AUTH_RESPONSE are decoded; every other frame (SEND above all) is passed on after the type
// peek, undecoded. A PRODUCER or SUBSCRIBE the policy denies is answered with
// AuthorizationError for its request id and never reaches the broker; the session goes on.
func (s *session) upstreamFilter(toClient *sink, ref *refresher) filterFunc {
	return func(t pb.BaseCommand_Type, command []byte) bool {
		var action authz.Action
		switch t {
		case pb.BaseCommand_PRODUCER:
			action = authz.ActionProduce
		case pb.BaseCommand_SUBSCRIBE:
			action = authz.ActionConsume
		case pb.BaseCommand_AUTH_RESPONSE:
			if ref != nil && ref.isPending() {
				if cmd, err := frame.Decode(command); err == nil && ref.offer(cmd.GetAuthResponse()) {
					return false
				}
			}
			s.srv.sec.Metrics.RelayedAuthResponse() // the broker asked: relay the answer
			return true
		default:
			return true
		}
		cmd, err := frame.Decode(command)
		if err != nil {
			return true // the broker refuses what it cannot parse
		}
		var topic string
		var id uint64
		if p := cmd.GetProducer(); p != nil {
			topic, id = p.GetTopic(), p.GetRequestId()
		} else if sub := cmd.GetSubscribe(); sub != nil {
			topic, id = sub.GetTopic(), sub.GetRequestId()
		}
		if !s.allowed(action, topic) {
			toClient.inject(frame.Error(id, pb.ServerError_AuthorizationError, denyMessage(s.role(), action, topic)))
			return false
		}
		s.srv.sec.Metrics.Forwarded(action)
		return true
	}
}
