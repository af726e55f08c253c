package websocket

import (
	"context"
	"errors"
	"net"
	"net/http"
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
	id       authn.Identity
	creds    authn.Credentials
}

// serve takes a request from its path to a session: parse, authenticate, decide, read the
// parameters, make the producer or consumer at the brokers, upgrade, run. Each step that
// fails answers with the status Pulsar's service gives.
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
	if !s.admit() {
		q.refuse(http.StatusServiceUnavailable, "pulsar-proxy: too many WebSocket sessions (websocket.maxSessions), retry later")
		return
	}
	ss := q.admitted()
	s.settled(ss)
	if ss != nil {
		ss.run() // on the request's goroutine: it has the connection for good
	}
}

// admitted authenticates, decides and opens; nil when refused (the client was told).
func (q *request) admitted() *session {
	if !q.authenticate() {
		return nil
	}
	action := authz.ActionConsume
	if q.endpoint.Kind == wsapi.Producer {
		action = authz.ActionProduce
	}
	if d := q.s.cfg.Policy.WebSocket(q.id, action, q.endpoint.Topic); d.Outcome != edge.Forward {
		q.refuse(d.Status, d.Message)
		return nil
	}
	return q.open()
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

// open makes the producer or consumer at the brokers and upgrades; nil when refused.
func (q *request) open() *session {
	cfg := &q.s.cfg
	client := cfg.Clients.New(q.who(), origin(q.r))
	var run func(ss *session)
	var err error
	switch q.endpoint.Kind {
	case wsapi.Producer:
		run, err = q.producer(client)
	case wsapi.Consumer:
		run, err = q.consumer(client)
	default:
		run, err = q.reader(client)
	}
	if err != nil {
		client.Close()
		q.refuse(refusalOf(err))
		return nil
	}
	opts := &websocket.AcceptOptions{InsecureSkipVerify: len(cfg.OriginPatterns) == 0, OriginPatterns: cfg.OriginPatterns,
		CompressionMode: websocket.CompressionDisabled}
	conn, err := websocket.Accept(q.w, q.r, opts)
	if err != nil { // not an upgrade request, or a refused origin: Accept answered
		client.Close()
		q.s.metrics.refused.WithLabelValues(q.label, "400").Inc()
		return nil
	}
	return newSession(q, conn, client, run)
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
