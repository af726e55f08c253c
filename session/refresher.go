package session

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/authn"
	"github.com/pulsar-proxy/pulsar-proxy/edge"
	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// refresher re-authenticates a client whose credentials expire during a session: at expiry
// the proxy sends AUTH_CHALLENGE and waits for an AUTH_RESPONSE that authenticates the same
// role. Broker-originated challenges are not its business: while the proxy has no challenge
// outstanding, AUTH_RESPONSEs go on to the broker.
//
// The deadline runs from the moment the credentials expire, whatever the client does: a
// challenge that cannot be written (a client that stops reading) is a failed refresh at the
// deadline, so not reading never keeps an expired identity alive.
type refresher struct {
	s         *session
	send      func(*pb.BaseCommand) error // writes to the client; may block
	abort     func()                      // ends the session at once (closes the client's socket)
	responses chan *pb.CommandAuthResponse

	mu      sync.Mutex
	pending bool

	armMu   sync.Mutex
	timer   *time.Timer    // fires at the next expiry; no goroutine waits for it
	rounds  sync.WaitGroup // the armed timer and the challenge in progress
	stopped bool
}

func (s *session) newRefresher(send func(*pb.BaseCommand) error) *refresher {
	return &refresher{s: s, send: send, abort: s.expireCredentials, responses: make(chan *pb.CommandAuthResponse, 1)}
}

// offer hands an AUTH_RESPONSE from the client over; it reports false when the proxy asked
// for none (it then belongs to the broker).
func (r *refresher) offer(resp *pb.CommandAuthResponse) bool {
	if r == nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.pending {
		return false
	}
	r.pending = false
	r.responses <- resp
	return true
}

func (r *refresher) setPending(p bool) {
	r.mu.Lock()
	r.pending = p
	r.mu.Unlock()
}

// errRefreshFailed ends a session whose credentials expired and were not renewed.
var errRefreshFailed = errors.New("credentials expired and not renewed")

// start arms the refresher: at each expiry it challenges the client, in a goroutine of
// its own while the challenge lasts (none waits between expiries: an idle session costs no
// goroutine for it). onFail is called when the client does not renew (it has been sent
// AuthenticationError, where it still reads). stop disarms it and waits for a challenge in
// progress.
func (r *refresher) start(ctx context.Context, supportsRefresh bool, onFail func()) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	r.arm(ctx, supportsRefresh, onFail)
	return func() {
		cancel()
		r.armMu.Lock()
		r.stopped = true
		if r.timer != nil && r.timer.Stop() {
			r.rounds.Done() // the timer will not run
		}
		r.armMu.Unlock()
		r.rounds.Wait()
	}
}

// arm sets the timer for the current credentials' expiry; credentials that never expire
// need none.
func (r *refresher) arm(ctx context.Context, supportsRefresh bool, onFail func()) {
	r.s.mu.Lock()
	expires := r.s.identity.Expires
	r.s.mu.Unlock()
	if expires.IsZero() {
		return
	}
	r.armMu.Lock()
	defer r.armMu.Unlock()
	if r.stopped {
		return
	}
	r.rounds.Add(1)
	r.timer = time.AfterFunc(time.Until(expires), func() {
		defer r.rounds.Done()
		if ctx.Err() != nil {
			return
		}
		if err := r.round(ctx, supportsRefresh); err != nil {
			onFail()
			return
		}
		if ctx.Err() == nil {
			r.arm(ctx, supportsRefresh, onFail) // renewed: the next expiry
		}
	})
}

// round renews the credentials that just expired; nil when renewed or when the session
// ended meanwhile.
func (r *refresher) round(ctx context.Context, supportsRefresh bool) error {
	s := r.s
	s.mu.Lock()
	id := s.identity
	s.mu.Unlock()
	if !supportsRefresh || s.srv.sec.Authenticator == nil {
		return r.fail(id.Method, &authn.Error{Method: id.Method, Reason: authn.ReasonExpired, Detail: "credentials expired and this client cannot refresh them"})
	}
	resp, err := r.challenge(ctx, id)
	if err != nil || resp == nil {
		return err
	}
	return r.renew(id, resp)
}

// challenge asks for fresh credentials and waits for the answer until the expiry plus the
// refresh timeout. nil, nil: the session ended meanwhile.
func (r *refresher) challenge(ctx context.Context, id authn.Identity) (*pb.CommandAuthResponse, error) {
	s := r.s
	deadline := id.Expires.Add(s.srv.sec.RefreshTimeout)
	timedOut := func() error {
		return r.fail(id.Method, &authn.Error{Method: id.Method, Reason: authn.ReasonRefreshTimeout, Detail: "no answer to the credential refresh challenge"})
	}
	r.setPending(true)
	challenge := &pb.BaseCommand{Type: pb.BaseCommand_AUTH_CHALLENGE.Enum(), AuthChallenge: &pb.CommandAuthChallenge{
		ServerVersion:   proto.String(s.srv.cfg.ServerVersion),
		Challenge:       &pb.AuthData{AuthMethodName: proto.String(id.Method), AuthData: refreshData},
		ProtocolVersion: proto.Int32(s.srv.cfg.ProtocolVersion),
	}}
	stuck := time.AfterFunc(time.Until(deadline), r.abort)
	err := r.send(challenge)
	if !stuck.Stop() || err != nil {
		// Blocked until the deadline (the session is being closed) or failed: either way the
		// client did not take the challenge, so it cannot renew.
		return nil, timedOut()
	}
	wait := time.NewTimer(time.Until(deadline))
	defer wait.Stop()
	select {
	case <-ctx.Done():
		return nil, nil
	case <-wait.C:
		return nil, timedOut()
	case resp := <-r.responses:
		return resp, nil
	}
}

// renew authenticates the answer: the same role, not yet expired.
func (r *refresher) renew(id authn.Identity, resp *pb.CommandAuthResponse) error {
	s := r.s
	creds := authn.Credentials{Method: resp.GetResponse().GetAuthMethodName(), Data: resp.GetResponse().GetAuthData()}
	if creds.Method == "tls" {
		creds.PeerCertificates = s.peerCertificates()
	}
	fresh, err := s.srv.sec.Authenticator.Authenticate(creds)
	if err == nil && fresh.Role != id.Role {
		err = &authn.Error{Method: creds.Method, Reason: authn.ReasonNoRole, Detail: "refreshed credentials name role " + edge.QuoteRole(fresh.Role) + ", not " + edge.QuoteRole(id.Role)}
	}
	if err == nil && fresh.Expired(time.Now()) {
		err = &authn.Error{Method: creds.Method, Reason: authn.ReasonExpired, Detail: "refreshed credentials are already expired"}
	}
	if err != nil {
		return r.fail(creds.Method, err)
	}
	s.mu.Lock()
	s.identity = fresh
	s.clientCreds = creds
	s.mu.Unlock()
	s.srv.sec.Metrics.Refreshed(true)
	s.with(s.srv.log.Debug()).Time("expires", fresh.Expires).Msg("client credentials refreshed")
	return nil
}

// fail counts the failure, tells the client (bounded: a client that does not read is cut
// off) and reports errRefreshFailed.
func (r *refresher) fail(method string, err error) error {
	s := r.s
	r.setPending(false)
	if method == "" {
		method = "none"
	}
	s.srv.sec.Metrics.AuthFailure(method, authn.ReasonOf(err))
	s.srv.sec.Metrics.Refreshed(false)
	s.with(s.srv.log.Debug()).Err(err).Msg("closing session: credentials not renewed")
	stuck := time.AfterFunc(s.srv.cfg.HandshakeTimeout, r.abort)
	defer stuck.Stop()
	r.send(frame.Error(0, pb.ServerError_AuthenticationError, "pulsar-proxy: "+err.Error()))
	return errRefreshFailed
}
