// Package adminproxy is the HTTP plane's reverse proxy: Pulsar's admin REST API (/admin/v2,
// /admin/v3 and v1 /admin), topic lookups over HTTP (/lookup) and the Functions worker API, in
// front of the brokers' (and workers') web services.
//
// A request is authenticated at the edge (when an Authenticator is set), checked for a
// canonical path, bounded (concurrency in all and per principal, taken after authentication;
// body size; a minimum body rate; per-phase timeouts), and sent to a live
// broker's web service chosen round robin, healthy brokers first; a broker whose web service
// cannot be dialled is skipped for the next. Bodies stream both ways. A 307/308 from a broker
// (the owner of a topic is another broker, an instance runs on another worker) is followed by
// the proxy, with the body sent again from a bounded copy, and only to an endpoint the
// upstream set allows (the same no-open-relay rule as direct-mode targets): anything else is
// refused with 502 and never dialled.
package adminproxy

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/pulsar-proxy/pulsar-proxy/authn"
	"github.com/pulsar-proxy/pulsar-proxy/edge"
	"github.com/pulsar-proxy/pulsar-proxy/internal/jsonlog"
	"github.com/pulsar-proxy/pulsar-proxy/internal/refusal"
)

// Upstreams are the web services one kind of request may go to.
type Upstreams interface {
	// WebURLs returns the base URLs (scheme://host:port) to try, in order of preference.
	WebURLs() []string
	// AllowWeb reports whether a redirect to scheme://host:port may be followed.
	AllowWeb(scheme, host, port string) bool
}

// Authenticator names the role of a client's credentials (authn.Authenticator).
type Authenticator interface {
	Authenticate(authn.Credentials) (authn.Identity, error)
}

// Policy is the edge's decision on a route (edge.Edge): the same policy as the binary
// planes'.
type Policy interface {
	Route(id authn.Identity, method string, u *url.URL) edge.Decision
	Visible(id authn.Identity, topic string) bool
}

// FailureCounter counts refused authentications (authn.Metrics).
type FailureCounter interface {
	AuthFailure(method string, reason authn.Reason)
}

// Refusals is where the admin proxy reports the clients it refuses (refusal.Summary).
type Refusals interface {
	Refused(k refusal.Kind, detail, remote, told string)
}

// Config configures a Proxy.
type Config struct {
	Brokers Upstreams // the admin API and lookups
	Workers Upstreams // the Functions worker API; nil: Brokers
	// Auth authenticates clients; nil turns authentication off: requests go on with the
	// client's own headers (brokers authenticate the client themselves).
	Auth         Authenticator
	AuthFailures FailureCounter // may be nil
	// Refusals is told of every refused authentication, for the log's summaries; nil: not.
	Refusals Refusals
	// Policy decides what an authenticated role may do (nil: brokers decide everything).
	Policy Policy
	// ProxyCredentials are the proxy's own credentials for brokers (method, data); nil: none.
	// Used with Auth: the broker authenticates the proxy and decides for the client's role,
	// named in X-Original-Principal.
	ProxyCredentials func() (method string, data []byte, err error)
	// ForwardClientCredentials sends the client's own Authorization header on instead of the
	// proxy's (the role is still named in X-Original-Principal).
	ForwardClientCredentials bool
	// TLS is the client configuration for https:// upstreams (nil: the system's roots).
	TLS *tls.Config
	// Advertise names the proxy's listeners as the client of a request reaches them, for the
	// answers of HTTP topic lookups (see Advertised); nil: lookups are answered as the
	// broker answered them.
	Advertise func(*http.Request) Advertised

	DialTimeout     time.Duration // connect (and TLS handshake) to a web service
	ResponseTimeout time.Duration // from the request sent to the answer's headers
	RequestTimeout  time.Duration // a whole request, redirects and bodies included
	// ReadTimeout is the longest pause while a client sends its body or reads the answer.
	ReadTimeout time.Duration
	// MinBodyRate is the slowest a request body may arrive on average, in bytes a second, once
	// MinBodyRateGrace of waiting for it has passed (see bodyReader); 0: no floor.
	MinBodyRate      float64
	MinBodyRateGrace time.Duration
	MaxConcurrent    int
	// MaxConcurrentPerPrincipal bounds one principal's requests at once: an authenticated
	// role's, or one client address's when there is none (authentication off, anonymous);
	// 0: MaxConcurrent.
	MaxConcurrentPerPrincipal int
	// IPv6PrefixLength: a client without a role is counted by this prefix of its IPv6 address
	// (0: 64), as the per-IP connection limits count it.
	IPv6PrefixLength int
	MaxBodySize      int64
	MaxRedirects     int
	// AccessLog is the level of the line logged per request; zerolog.Disabled: none.
	AccessLog zerolog.Level
	Logger    zerolog.Logger
	Metrics   *Metrics // nil: counted but not registered
	// SpoolDir holds request bodies beyond the in-memory part while a redirect may need
	// them; "" = os.TempDir().
	SpoolDir string
	// SpoolBudget bounds the bytes kept in SpoolDir, all requests together; 0: no bound.
	SpoolBudget int64
	// memBody is the in-memory part of a kept body; 0 = 256 KiB.
	memBody int
}

// Proxy serves the admin paths; build it with New.
type Proxy struct {
	cfg       Config
	metrics   *Metrics
	slots     *slots
	spool     *spoolBudget
	rp        *httputil.ReverseProxy
	transport *http.Transport
}

// New builds the proxy; nothing is dialled until a request comes.
func New(cfg Config) (*Proxy, error) {
	if cfg.Brokers == nil {
		return nil, errors.New("adminproxy: no broker upstreams")
	}
	if cfg.Workers == nil {
		cfg.Workers = cfg.Brokers
	}
	if cfg.MaxConcurrent < 1 || cfg.MaxBodySize < 1 || cfg.MaxRedirects < 1 {
		return nil, errors.New("adminproxy: MaxConcurrent, MaxBodySize and MaxRedirects must be positive")
	}
	if cfg.MinBodyRate < 0 || (cfg.MinBodyRate > 0 && cfg.MinBodyRateGrace <= 0) {
		return nil, errors.New("adminproxy: MinBodyRate must not be negative, and needs a positive MinBodyRateGrace")
	}
	if cfg.memBody <= 0 {
		cfg.memBody = 256 << 10
	}
	if cfg.SpoolDir == "" {
		cfg.SpoolDir = os.TempDir()
	}
	dialer := &net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second}
	var tc *tls.Config
	if cfg.TLS != nil {
		tc = cfg.TLS.Clone()
	}
	t := &http.Transport{
		Proxy:                 nil, // never an HTTP proxy from the environment
		DialContext:           dialer.DialContext,
		TLSClientConfig:       tc,
		TLSHandshakeTimeout:   cfg.DialTimeout,
		ResponseHeaderTimeout: cfg.ResponseTimeout,
		ExpectContinueTimeout: time.Second,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true, // bodies pass as the broker encoded them
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	p := &Proxy{cfg: cfg, metrics: cfg.Metrics, slots: newSlots(cfg.MaxConcurrent, cfg.MaxConcurrentPerPrincipal),
		spool: newSpoolBudget(cfg.SpoolBudget, cfg.Metrics), transport: t}
	p.rp = &httputil.ReverseProxy{
		Rewrite:        p.rewrite,
		ModifyResponse: p.modifyResponse,
		Transport:      &redirector{p: p, base: t},
		FlushInterval:  100 * time.Millisecond, // answers of unknown length are flushed at once anyway
		BufferPool:     newBufferPool(),
		ErrorHandler:   p.proxyError,
		ErrorLog:       jsonlog.StdLogger(cfg.Logger, "admin API proxy error"),
	}
	return p, nil
}

// Close closes idle broker connections.
func (p *Proxy) Close() { p.transport.CloseIdleConnections() }

// Handler serves the admin paths (/admin/..., /lookup/...) and hands every other request to
// next (the health, readiness and metrics endpoints).
func (p *Proxy) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// An admin request leaves its connection with a write deadline (see serve); a next
		// request on the same connection starts without one.
		http.NewResponseController(w).SetWriteDeadline(time.Time{})
		rt, err := classify(r.URL.Path)
		if errors.Is(err, errNotProxied) {
			next.ServeHTTP(w, r)
			return
		}
		p.serve(w, r, rt, err)
	})
}

// exchange is the state of one proxied request, shared by the handler, the rewrite hook, the
// redirect-following transport and the error handler (through the request's context).
type exchange struct {
	in       *http.Request // the client's request
	route    route
	identity authn.Identity
	authed   bool
	decision edge.Decision // the edge's, for an admitted request
	body     *replayBody   // nil without a request body
	ups      Upstreams
	first    string // the web service the request went to first
	last     string // the one that answered
	redirect int    // redirects followed
	status   int    // set by the error handler
	reason   string // why it failed, for the log
	// cut is why the client's body was cut off (errClientStalled, errBodyTooSlow): the server
	// then cancels the request, so the transport may report only that.
	cut atomic.Pointer[error]
}

func (x *exchange) cutBody(err error) { x.cut.CompareAndSwap(nil, &err) }

// cutError is why the client's body was cut off; nil if it was not.
func (x *exchange) cutError() error {
	if e := x.cut.Load(); e != nil {
		return *e
	}
	return nil
}

type exchangeKey struct{}

func exchangeOf(ctx context.Context) *exchange {
	x, _ := ctx.Value(exchangeKey{}).(*exchange)
	return x
}

func (p *Proxy) serve(w http.ResponseWriter, r *http.Request, rt route, pathErr error) {
	began := time.Now()
	x := &exchange{route: rt, in: r}
	rec := &recorder{ResponseWriter: w, rc: http.NewResponseController(w), timeout: p.cfg.ReadTimeout}
	rec.closeUnread = r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody
	rec.bodyDone = func() bool { return x.body != nil && x.body.srcErr == io.EOF }
	defer func() {
		// What the server still does after the handler (flush the answer, read what is left
		// of a body to keep the connection) is bounded too; the next request's reading
		// sets its own deadline, and Handler clears the write deadline.
		rec.rc.SetReadDeadline(time.Now().Add(p.cfg.ReadTimeout))
		rec.rc.SetWriteDeadline(time.Now().Add(p.cfg.ReadTimeout))
		label := x.route.label
		if label == "" {
			label = "/invalid"
		}
		p.metrics.done(label, rec.code(), time.Since(began).Seconds())
		p.accessLog(r, x, rec, label, time.Since(began))
	}()
	release, ok := p.admit(rec, r, x, pathErr)
	if !ok {
		return
	}
	defer release()
	x.ups = p.cfg.Brokers
	if rt.workers {
		x.ups = p.cfg.Workers
	}
	ctx, cancel := context.WithTimeout(r.Context(), p.cfg.RequestTimeout)
	defer cancel()
	ctx = context.WithValue(ctx, exchangeKey{}, x)
	if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
		src := &bodyReader{r: http.MaxBytesReader(w, r.Body, p.cfg.MaxBodySize), rc: rec.rc, pause: p.cfg.ReadTimeout,
			minRate: p.cfg.MinBodyRate, grace: p.cfg.MinBodyRateGrace, cut: x.cutBody}
		x.body = &replayBody{src: src, spool: spool{dir: p.cfg.SpoolDir, memMax: p.cfg.memBody, budget: p.spool}}
		defer x.body.release(5 * time.Second)
	}
	p.rp.ServeHTTP(rec, r.WithContext(ctx))
}

// admit applies what a request must pass before it is forwarded: a canonical path, no
// upgrade, credentials, a body within the limit, then a place among the requests served at
// once, its principal's and in all. The place is taken last, so that waiting on
// authentication (an identity provider's keys) holds none. A refused request has been
// answered; an admitted one gives its place back with release.
func (p *Proxy) admit(rec *recorder, r *http.Request, x *exchange, pathErr error) (release func(), ok bool) {
	if pathErr != nil {
		x.reason = "path " + r.URL.Path + " is not in canonical form"
		writeError(rec, http.StatusBadRequest, x.reason+": no '.' or '..' segments, empty segments, backslashes or control characters, also when percent-encoded")
		return nil, false
	}
	if r.Header.Get("Upgrade") != "" || r.Method == http.MethodConnect {
		x.reason = "upgrade or CONNECT"
		writeError(rec, http.StatusBadRequest, "protocol upgrades and CONNECT are not proxied")
		return nil, false
	}
	if !p.authenticate(rec, r, x) {
		return nil, false
	}
	if !p.decide(rec, r, x) {
		return nil, false
	}
	if r.ContentLength > p.cfg.MaxBodySize {
		x.reason = "body too large"
		writeError(rec, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body of %d bytes is over the limit of %d (admin.maxRequestBodySize)", r.ContentLength, p.cfg.MaxBodySize))
		return nil, false
	}
	// A body whose declared length cannot be kept now is refused before anything is sent:
	// sent to a broker that redirects, it could not be sent again, and the client would have
	// sent it for nothing. (One of unknown length is let through: it may be small.)
	if disk := r.ContentLength - int64(p.cfg.memBody); disk > 0 && !p.spool.fits(disk) {
		p.refuseSpool(rec, x)
		return nil, false
	}
	key, who := principalKey(r, x.identity, x.authed, p.cfg.IPv6PrefixLength)
	give, refused := p.slots.take(key)
	if refused != "" {
		p.metrics.rejected.WithLabelValues(refused).Inc()
		x.reason = "concurrency limit"
		msg := fmt.Sprintf("more than %d admin requests at once; retry later", p.cfg.MaxConcurrent)
		if refused == rejectPrincipal {
			x.reason = "concurrency limit per principal"
			msg = fmt.Sprintf("more than %d admin requests at once from %s (admin.maxConcurrentRequestsPerPrincipal); retry later", p.slots.perKey, who)
		}
		rec.Header().Set("Retry-After", "1")
		writeError(rec, http.StatusTooManyRequests, msg)
		return nil, false
	}
	p.metrics.inFlight.Inc()
	return func() { p.metrics.inFlight.Dec(); give() }, true
}

// authenticate names the client's role when authentication is on; false: refused with 401.
func (p *Proxy) authenticate(rec *recorder, r *http.Request, x *exchange) bool {
	if p.cfg.Auth == nil {
		return true
	}
	id, err := p.cfg.Auth.Authenticate(credentials(r))
	if err != nil {
		var ae *authn.Error
		if errors.As(err, &ae) && p.cfg.AuthFailures != nil {
			p.cfg.AuthFailures.AuthFailure(ae.Method, ae.Reason)
		}
		if p.cfg.Refusals != nil {
			p.cfg.Refusals.Refused(refusal.AuthFailed, string(authn.ReasonOf(err)), r.RemoteAddr, err.Error())
		}
		x.reason = err.Error()
		rec.Header().Set("WWW-Authenticate", `Bearer realm="pulsar-proxy"`)
		writeError(rec, http.StatusUnauthorized, err.Error())
		return false
	}
	x.identity, x.authed = id, true
	return true
}

// spoolRetryAfter is the Retry-After of a request refused for the spool budget, in seconds:
// the budget comes back as the uploads in progress end, which takes a while.
const spoolRetryAfter = "5"

// refuseSpool answers a request whose body cannot be kept within admin.maxSpooledBytes.
func (p *Proxy) refuseSpool(rec *recorder, x *exchange) {
	p.metrics.rejected.WithLabelValues(rejectSpool).Inc()
	x.reason = errSpoolBudget.Error()
	rec.Header().Set("Retry-After", spoolRetryAfter)
	writeError(rec, http.StatusServiceUnavailable, errSpoolBudget.Error()+"; retry later")
}

// methodOverrides are the headers with which some servers let a request name another method.
var methodOverrides = []string{"X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override"}

// decide asks the edge about the route; a refusal is answered here and never reaches a
// broker.
func (p *Proxy) decide(rec *recorder, r *http.Request, x *exchange) bool {
	if p.cfg.Policy == nil {
		return true
	}
	x.decision = p.cfg.Policy.Route(x.identity, r.Method, r.URL)
	if x.decision.Outcome == edge.Forward {
		return true
	}
	d := x.decision
	x.reason = d.Message
	if d.Status == http.StatusTooManyRequests {
		rec.Header().Set("Retry-After", "1")
	}
	writeRefusal(rec, d)
	return false
}

// rewrite is the ReverseProxy hook: the request as a broker gets it. The target is set per
// attempt by the transport; this sets what every attempt shares.
func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	x := exchangeOf(pr.In.Context())
	pr.Out.URL.Scheme, pr.Out.URL.Host = "http", "upstream.invalid" // replaced per attempt
	pr.Out.Host = ""
	pr.SetXForwarded()
	h := pr.Out.Header
	// Never the client's word for who it is, nor for which method it means: the edge decided
	// on the request's own method.
	h.Del(headerOriginalPrincipal)
	for _, o := range methodOverrides {
		h.Del(o)
	}
	if x != nil && (x.decision.FilterTopics || (p.cfg.Advertise != nil && isTopicLookup(pr.In.URL.Path))) {
		// The answer is read to be filtered or rewritten: it must come uncompressed (brokers
		// gzip by default, and Go's HTTP client asks for it).
		h.Del("Accept-Encoding")
	}
	if x == nil || !x.authed {
		return // authentication off: the client's credentials go on as they are
	}
	if !p.cfg.ForwardClientCredentials || h.Get("Authorization") == "" {
		h.Del("Authorization")
		h.Del(headerAuthMethod)
		if p.cfg.ProxyCredentials != nil {
			if method, data, err := p.cfg.ProxyCredentials(); err == nil && method == "token" {
				h.Set("Authorization", "Bearer "+string(data))
				h.Set(headerAuthMethod, "token")
			} else if err != nil {
				p.cfg.Logger.Warn().Err(err).Msg("admin proxy: the proxy's broker token cannot be read; the request goes without it")
			}
		}
	}
	h.Set(headerOriginalPrincipal, x.identity.Role)
}

// proxyError answers a request that got no answer from a broker, with a status and a reason
// a human can act on.
func (p *Proxy) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	x := exchangeOf(r.Context())
	status, reason, metric := classifyError(r.Context(), err)
	if x != nil && x.cutError() != nil {
		cut := x.cutError()
		status, reason, metric = http.StatusRequestTimeout, bodyCutReason(cut, p.cfg.MinBodyRate, p.cfg.MinBodyRateGrace), ""
		if errors.Is(cut, errBodyTooSlow) {
			p.metrics.rejected.WithLabelValues(rejectBodyRate).Inc()
		}
	}
	if metric != "" {
		p.metrics.upstream.WithLabelValues(metric).Inc()
	}
	if x != nil {
		x.status, x.reason = status, reason
	}
	if status == statusClientClosed {
		return // nobody to answer
	}
	if ue := (*upstreamError)(nil); errors.As(err, &ue) && ue.retryAfter != "" {
		w.Header().Set("Retry-After", ue.retryAfter)
	}
	writeError(w, status, reason)
}

// statusClientClosed is what the access log and metrics record for a client that went away
// before its answer (nginx's 499; never sent).
const statusClientClosed = 499

func classifyError(ctx context.Context, err error) (status int, reason, metric string) {
	var ue *upstreamError
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over the limit of %d bytes (admin.maxRequestBodySize)", mbe.Limit), ""
	case errors.As(err, &ue):
		return ue.status, ue.Error(), ue.metric
	case errors.Is(err, errClientStalled) || errors.Is(err, errBodyTooSlow):
		return http.StatusRequestTimeout, err.Error(), ""
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return http.StatusGatewayTimeout, "the request took longer than admin.requestTimeout", reasonTimeout
	case errors.Is(err, context.Canceled) || errors.Is(ctx.Err(), context.Canceled):
		return statusClientClosed, "client went away", ""
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return http.StatusGatewayTimeout, "broker did not answer in time (admin.responseTimeout): " + err.Error(), reasonTimeout
	}
	return http.StatusBadGateway, "broker request failed: " + err.Error(), reasonBroken
}

// writeRefusal answers an edge refusal: Pulsar's error body, with the action and the
// resource the policy did not grant.
func writeRefusal(w http.ResponseWriter, d edge.Decision) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(d.Status)
	b, _ := json.Marshal(struct {
		Reason   string `json:"reason"`
		Action   string `json:"action,omitempty"`
		Resource string `json:"resource,omitempty"`
	}{d.Message, string(d.Action), d.Resource})
	w.Write(append(b, '\n'))
}

// writeError answers with Pulsar's error body, {"reason": ...}, which its admin tools print.
func writeError(w http.ResponseWriter, status int, reason string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	b, _ := json.Marshal(struct {
		Reason string `json:"reason"`
	}{reason})
	w.Write(append(b, '\n'))
}

func (p *Proxy) accessLog(r *http.Request, x *exchange, rec *recorder, label string, took time.Duration) {
	if p.cfg.AccessLog == zerolog.Disabled {
		return
	}
	ev := p.cfg.Logger.WithLevel(p.cfg.AccessLog)
	if ev == nil {
		return
	}
	ev = ev.Str("method", r.Method).Str("route", label).Str("path", r.URL.Path).Int("status", rec.code()).
		Int64("bytes_in", readBytes(x)).Int64("bytes_out", rec.bytes).Str("remote", r.RemoteAddr)
	ev = jsonlog.Seconds(ev, "took", took)
	if x.authed {
		ev = ev.Str("principal", x.identity.Role)
	}
	if x.first != "" {
		ev = ev.Str("broker", x.first)
	}
	if x.redirect > 0 {
		ev = ev.Int("redirects", x.redirect).Str("served_by", x.last)
	}
	if x.reason != "" {
		ev = ev.Str("error", x.reason)
	}
	ev.Msg("admin request")
}

func readBytes(x *exchange) int64 {
	if x.body == nil {
		return 0
	}
	return x.body.spool.size
}

// recorder is the response writer the proxy writes through: it keeps the status and the byte
// count for the log, and gives the client admin.readTimeout per write (a client that stops
// reading is cut off rather than holding a broker connection).
type recorder struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	status  int
	bytes   int64
	// closeUnread closes the connection after an error answer to a request whose body was
	// not read to its end, rather than let the server wait for the rest (a stalled client).
	closeUnread bool
	bodyDone    func() bool
}

func (w *recorder) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
		if code >= 400 && w.closeUnread && !w.bodyDone() {
			w.Header().Set("Connection", "close")
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.timeout > 0 {
		w.rc.SetWriteDeadline(time.Now().Add(w.timeout))
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController (the reverse proxy's flushes) reach the connection.
func (w *recorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *recorder) code() int {
	if w.status == 0 {
		return statusClientClosed
	}
	return w.status
}

// copyBufferSize is the reverse proxy's copy buffer: what one request or answer holds at a
// time while its body streams.
const copyBufferSize = 32 << 10

// bufferPool lends the reverse proxy its copy buffers; one per Proxy. Pointers to arrays
// keep Put from allocating.
type bufferPool struct{ p sync.Pool }

func newBufferPool() *bufferPool {
	return &bufferPool{p: sync.Pool{New: func() any { return new([copyBufferSize]byte) }}}
}

func (bp *bufferPool) Get() []byte { return bp.p.Get().(*[copyBufferSize]byte)[:] }

func (bp *bufferPool) Put(b []byte) {
	if len(b) == copyBufferSize {
		bp.p.Put((*[copyBufferSize]byte)(b))
	}
}

// webURL splits a base URL of Upstreams.
func parseBase(base string) (*url.URL, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("bad upstream URL %q", base)
	}
	return u, nil
}
