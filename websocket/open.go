package websocket

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/pulsar-proxy/pulsar-proxy/authn"
	"github.com/pulsar-proxy/pulsar-proxy/authz"
	"github.com/pulsar-proxy/pulsar-proxy/edge"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/pulsarclient"
	"github.com/pulsar-proxy/pulsar-proxy/internal/refusal"
	"github.com/pulsar-proxy/pulsar-proxy/upstream"
	"github.com/pulsar-proxy/pulsar-proxy/websocket/wsapi"
)

// request is one request of the API on its way to becoming a session.
type request struct {
	s        *Server
	w        http.ResponseWriter
	r        *http.Request
	endpoint wsapi.Endpoint
	label    string // the endpoint as a metric label
	accept   *websocket.AcceptOptions
	id       authn.Identity
	creds    authn.Credentials
}

// serve takes a request from its path to a session: parse, check the upgrade and its origin,
// authenticate, decide, read the parameters, make the producer or consumer at the brokers,
// upgrade, run. Each step that fails answers with the status Pulsar's service gives. What is
// no upgrade, or comes from another site's page, is refused first: it spends nothing of the
// role's (its lookup rate). A session's slot (MaxSessions) and its place in the role's
// connection limit are taken only once the client is authenticated and allowed, so that
// clients without credentials cannot use them up.
func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	// An admin request before this one on the same connection may have left deadlines on it
	// (adminproxy bounds its writes); a session sets its own.
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Time{})
	rc.SetWriteDeadline(time.Time{})
	q := &request{s: s, w: w, r: r, label: "none"}
	ep, err := wsapi.ParsePath(r.URL.EscapedPath())
	if err != nil {
		q.refuse(refusalOf(err))
		return
	}
	q.endpoint, q.label = ep, ep.Kind.String()
	q.accept = &websocket.AcceptOptions{OriginPatterns: s.cfg.OriginPatterns, CompressionMode: websocket.CompressionDisabled}
	if !q.upgradable() || !q.authenticate() || !q.allowed() {
		return
	}
	release, ok := s.cfg.Policy.AcquireSession(q.id.Role)
	if !ok {
		msg := "pulsar-proxy: role " + edge.QuoteRole(q.id.Role) + " has as many connections as its limit allows, retry later"
		if rf := s.cfg.Refusals; rf != nil {
			rf.Refused(refusal.ConnectionLimit, "websocket role_connections", r.RemoteAddr, msg)
		}
		q.refuse(http.StatusTooManyRequests, msg)
		return
	}
	defer release()
	if !s.admit() {
		q.refuse(http.StatusServiceUnavailable, "pulsar-proxy: too many WebSocket sessions (websocket.maxSessions), retry later")
		return
	}
	ss := q.open()
	s.settled(ss)
	if ss != nil {
		ss.run() // on the request's goroutine: it has the connection for good
	}
}

// allowed asks the edge; false: refused, the client was told.
func (q *request) allowed() bool {
	action := authz.ActionConsume
	if q.endpoint.Kind == wsapi.Producer {
		action = authz.ActionProduce
	}
	if d := q.s.cfg.Policy.WebSocket(q.id, action, q.endpoint.Topic); d.Outcome != edge.Forward {
		q.refuse(d.Status, d.Message)
		return false
	}
	return true
}

// authenticate names the client's role; false: refused (401), the client was told.
func (q *request) authenticate() bool {
	q.creds = credentials(q.r)
	auth := q.s.cfg.Auth
	if auth == nil {
		return true
	}
	id, err := auth.Authenticate(q.creds)
	if err != nil {
		method := q.creds.Method
		if method == "" {
			method = "none"
		}
		reason := authn.ReasonOf(err)
		if reason == "" {
			reason = authn.ReasonMalformed
		}
		if f := q.s.cfg.AuthFailures; f != nil {
			f.AuthFailure(method, reason)
		}
		if r := q.s.cfg.Refusals; r != nil {
			r.Refused(refusal.AuthFailed, string(reason), q.r.RemoteAddr, err.Error())
		}
		q.refuse(http.StatusUnauthorized, "Failed to authenticate: pulsar-proxy: "+err.Error())
		return false
	}
	q.id = id
	return true
}

// credentials are the request's credentials; without an Authorization header, the token
// query parameter stands for it (browsers cannot set headers on a WebSocket), with or
// without its "Bearer " prefix.
func credentials(r *http.Request) authn.Credentials {
	if r.Header.Get("Authorization") == "" {
		if tok := r.URL.Query().Get("token"); tok != "" {
			r = r.Clone(r.Context())
			if !strings.HasPrefix(tok, "Bearer ") {
				tok = "Bearer " + tok
			}
			r.Header.Set("Authorization", tok)
		}
	}
	return authn.HTTPCredentials(r)
}

// open reads the parameters, makes the producer or consumer at the brokers and upgrades; nil
// when refused (the client was told).
func (q *request) open() *session {
	cfg := &q.s.cfg
	var create maker
	var err error
	switch q.endpoint.Kind {
	case wsapi.Producer:
		create, err = q.producer()
	case wsapi.Consumer:
		create, err = q.consumer()
	default:
		create, err = q.reader()
	}
	if err != nil {
		q.refuse(refusalOf(err))
		return nil
	}
	client := cfg.Clients.New(q.who(), origin(q.r))
	run, err := create(client)
	if err != nil {
		client.Close()
		q.refuse(refusalOf(err))
		return nil
	}
	conn, err := websocket.Accept(q.w, q.r, q.accept)
	if err != nil { // checked by upgradable: only a connection that cannot be taken over
		client.Close()
		q.s.metrics.refused.WithLabelValues(q.label, "500").Inc()
		return nil
	}
	return newSession(q, conn, client, run)
}

// upgradable runs the library's own checks of the upgrade request and of its origin, before
// anything is made at the brokers: Accept on a writer that cannot be taken over stops, when
// the checks pass, at the take-over (501). A request the checks refuse gets their answer.
func (q *request) upgradable() bool {
	probe := httptest.NewRecorder()
	if _, err := websocket.Accept(probe, q.r, q.accept); err == nil || probe.Code == http.StatusNotImplemented {
		return true
	}
	for k, v := range probe.Header() {
		q.w.Header()[k] = v
	}
	q.s.metrics.refused.WithLabelValues(q.label, httpCode(probe.Code)).Inc()
	q.w.WriteHeader(probe.Code)
	q.w.Write(probe.Body.Bytes())
	return false
}

// who is whom the brokers see: the role, and its token when credentials are forwarded.
func (q *request) who() upstream.Client {
	c := upstream.Client{Principal: q.id.Role}
	if q.s.cfg.ForwardClientCredentials && q.creds.Method == "token" && q.s.cfg.Auth != nil {
		c.AuthMethod, c.AuthData, c.Expires = q.creds.Method, q.creds.Data, q.id.Expires
	}
	return c
}

// origin is the client's address and the listener's, for a PROXY header to brokers.
func origin(r *http.Request) *upstream.Origin {
	client, err := net.ResolveTCPAddr("tcp", r.RemoteAddr)
	if err != nil {
		return nil
	}
	local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if local == nil {
		return nil
	}
	return &upstream.Origin{Client: client, Proxy: local}
}

func (q *request) refuse(status int, msg string) {
	q.s.metrics.refused.WithLabelValues(q.label, httpCode(status)).Inc()
	http.Error(q.w, msg, status)
}

// refusalOf is the status and message of a failed step.
func refusalOf(err error) (int, string) {
	var r *wsapi.Refusal
	if errors.As(err, &r) {
		return r.Status, r.Message
	}
	return http.StatusInternalServerError, err.Error()
}

// createError is a producer's or consumer's creation refused at the brokers, with the status
// Pulsar's service gives: its producer answers busy (409) and blocked (503) apart and the
// rest 500; its consumer tells more apart; its reader answers 500 whatever the cause.
func createError(k wsapi.Kind, err error) error {
	code := pulsarclient.CodeOf(err)
	status := http.StatusInternalServerError
	// The service checks the role before it makes anything (401, 403); the proxy leaves that
	// to the brokers when it has no policy of its own, and answers their refusal the same.
	switch code {
	case pb.ServerError_AuthenticationError:
		return &wsapi.Refusal{Status: http.StatusUnauthorized, Message: "Failed to authenticate: " + err.Error()}
	case pb.ServerError_AuthorizationError:
		return &wsapi.Refusal{Status: http.StatusForbidden, Message: "Not authorized: " + err.Error()}
	}
	switch k {
	case wsapi.Producer:
		switch code {
		case pb.ServerError_ProducerBusy:
			status = http.StatusConflict
		case pb.ServerError_ProducerBlockedQuotaExceededError, pb.ServerError_ProducerBlockedQuotaExceededException:
			status = http.StatusServiceUnavailable
		}
		return &wsapi.Refusal{Status: status, Message: "Failed to create producer: " + err.Error()}
	case wsapi.Reader:
		return &wsapi.Refusal{Status: status, Message: "Failed to create reader: " + err.Error()}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		status = http.StatusGatewayTimeout
	}
	switch code {
	case pb.ServerError_AuthenticationError:
		status = http.StatusUnauthorized
	case pb.ServerError_AuthorizationError:
		status = http.StatusForbidden
	case pb.ServerError_TopicNotFound:
		status = http.StatusNotFound
	case pb.ServerError_ConsumerBusy, pb.ServerError_ProducerFenced, pb.ServerError_IncompatibleSchema:
		status = http.StatusConflict
	case pb.ServerError_TooManyRequests:
		status = http.StatusTooManyRequests
	case pb.ServerError_TopicTerminatedError:
		status = http.StatusServiceUnavailable
	}
	return &wsapi.Refusal{Status: status, Message: "Failed to create producer/consumer: " + err.Error()}
}
