// Package websocket is the WebSocket plane: Pulsar's WebSocket API (its producer, consumer
// and reader endpoints, v1 and v2 paths) served on the proxy's HTTP listeners, spoken to
// brokers in the binary protocol through the proxy's own producers and consumers
// (internal/pulsarclient), each session on broker connections of its own in the client's
// name. A request is authenticated as on the other planes (a bearer token, the token query
// parameter browsers need, a client certificate), decided by the edge (produce for a
// producer, consume for a consumer or reader), and its producer or consumer made at the
// brokers before the upgrade, so that a refusal is an HTTP status, as Pulsar's service
// answers. The syntax of paths, parameters and messages is wsapi's.
package websocket

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/pulsar-proxy/pulsar-proxy/authn"
	"github.com/pulsar-proxy/pulsar-proxy/authz"
	"github.com/pulsar-proxy/pulsar-proxy/edge"
	"github.com/pulsar-proxy/pulsar-proxy/internal/pulsarclient"
	"github.com/pulsar-proxy/pulsar-proxy/internal/refusal"
	"github.com/pulsar-proxy/pulsar-proxy/websocket/wsapi"
)

// Authenticator names the role of a client's credentials (authn.Authenticator).
type Authenticator interface {
	Authenticate(authn.Credentials) (authn.Identity, error)
}

// FailureCounter counts refused authentications (authn.Metrics).
type FailureCounter interface {
	AuthFailure(method string, reason authn.Reason)
}

// Refusals is where the plane reports the clients it refuses authentication
// (refusal.Summary), for the log's summaries.
type Refusals interface {
	Refused(k refusal.Kind, detail, remote, told string)
}

// Policy is the edge's decision on opening a session (edge.Edge).
type Policy interface {
	WebSocket(id authn.Identity, a authz.Action, topic string) edge.Decision
}

// Config configures the plane.
type Config struct {
	Clients *pulsarclient.Factory
	// Auth authenticates clients; nil: no authentication (brokers see no role).
	Auth         Authenticator
	AuthFailures FailureCounter // may be nil
	Refusals     Refusals       // may be nil
	Policy       Policy
	// ForwardClientCredentials also names the client's token to brokers
	// (original_auth_data), as on the binary planes.
	ForwardClientCredentials bool
	MaxSessions              int           // sessions at once; more are answered 503
	MaxMessageSize           int64         // a text message from a client; larger ones close the session (1009)
	IdleTimeout              time.Duration // no frame either way for this long closes a session (1001); 0: never
	PingInterval             time.Duration // a ping to the client this often; 0: none
	// MaxPendingMessages bounds a producer's messages in flight to brokers (and their acks
	// waiting for the client); beyond it the proxy stops reading the client.
	MaxPendingMessages int
	// MaxBufferedBytes bounds the payload bytes a session holds: a producer's in flight, a
	// consumer's received ahead of its client (beyond it no more permits are granted).
	MaxBufferedBytes int
	// OriginPatterns are the browser origins allowed (path.Match patterns of host[:port]);
	// empty: any, as Pulsar's service.
	OriginPatterns []string
	// Location is the time zone of publishTime and eventTime in messages (the service writes
	// its own); nil: UTC.
	Location *time.Location
	Logger   zerolog.Logger
	Metrics  *Metrics // nil: counted, not registered
}

// Server serves the WebSocket API; build it with New.
type Server struct {
	cfg      Config
	metrics  *Metrics
	mu       sync.Mutex
	sessions map[*session]struct{}
	setting  int // requests being set up, counted against MaxSessions
	closing  bool
	wg       sync.WaitGroup
}

// New builds the plane.
func New(cfg Config) *Server {
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	if cfg.Location == nil {
		cfg.Location = time.UTC
	}
	cfg.Metrics.bufferCap.Set(float64(cfg.MaxBufferedBytes))
	return &Server{cfg: cfg, metrics: cfg.Metrics, sessions: map[*session]struct{}{}}
}

// Handler serves the API's paths (/ws/...) and hands every other request to next.
func (s *Server) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, wsapi.Prefix) {
			next.ServeHTTP(w, r)
			return
		}
		s.serve(w, r)
	})
}

// Shutdown closes every session (going away, 1001: the client reconnects, to another
// replica) and waits for them to end, or for ctx.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	sessions := make([]*session, 0, len(s.sessions))
	for ss := range s.sessions {
		sessions = append(sessions, ss)
	}
	s.mu.Unlock()
	for _, ss := range sessions {
		ss.goAway()
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// admit counts a request against MaxSessions; false: over it, or shutting down.
func (s *Server) admit() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing || (s.cfg.MaxSessions > 0 && len(s.sessions)+s.setting >= s.cfg.MaxSessions) {
		return false
	}
	s.setting++
	s.wg.Add(1)
	return true
}

// settled ends a request's set-up: as a session (ss) or not (nil).
func (s *Server) settled(ss *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setting--
	if ss != nil {
		s.sessions[ss] = struct{}{}
	} else {
		s.wg.Done()
	}
}

func (s *Server) ended(ss *session) {
	s.mu.Lock()
	delete(s.sessions, ss)
	s.mu.Unlock()
	s.wg.Done()
}

// unsubscribeTimeout bounds a consumer's unsubscribe at its brokers.
func (c *Config) unsubscribeTimeout() time.Duration { return 30 * time.Second }
