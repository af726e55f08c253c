package adminproxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// upstreamError is a failure on the broker side with the status the client gets.
type upstreamError struct {
	status     int
	metric     string // of pulsar_proxy_http_upstream_errors_total; "": not the brokers' doing
	msg        string
	err        error
	retryAfter string // the answer's Retry-After; "": none
}

func (e *upstreamError) Error() string {
	if e.err == nil {
		return e.msg
	}
	return e.msg + ": " + e.err.Error()
}

func (e *upstreamError) Unwrap() error { return e.err }

// bodyWait bounds how long a finished attempt's body may stay with the broker connection
// before the next attempt needs it.
const bodyWait = 10 * time.Second

// redirector is the reverse proxy's transport: it picks the web service, skips one that
// cannot be dialled, and follows redirects inside the cluster.
type redirector struct {
	p    *Proxy
	base http.RoundTripper
}

func (t *redirector) RoundTrip(req *http.Request) (*http.Response, error) {
	x := exchangeOf(req.Context())
	if x == nil {
		return nil, errors.New("adminproxy: request without its exchange")
	}
	candidates := x.ups.WebURLs()
	if len(candidates) == 0 {
		return nil, &upstreamError{status: http.StatusBadGateway, metric: reasonNoUpstream,
			msg: "no broker web service is known: discovery lists no broker with a usable web service URL (discovery.static.webBrokers, Consul meta web_port, discovery.dns.webPort, a registration's webServiceUrl; on a port of broker.allowedWebPorts and the broker's own host, else the proxy logs why not), or admin.functionWorkers is empty"}
	}
	// Every broker's failure goes into the reason: the order of candidates rotates, so the
	// last one alone would name a different broker from one request to the next.
	var failures []error
	for _, base := range candidates {
		u, err := parseBase(base)
		if err != nil {
			failures = append(failures, err)
			continue
		}
		out, err := t.attempt(req, x, u.Scheme, u.Host, nil)
		if err != nil {
			return nil, err
		}
		x.first, x.last = u.Host, u.Host
		resp, err := t.base.RoundTrip(out)
		if err != nil {
			if isDialError(err) {
				// Nothing was sent: the next broker gets the request (the body, if the
				// connection read any of it, is sent whole from its copy).
				t.p.cfg.Logger.Debug().Err(err).Str("broker", u.Host).Msg("admin proxy: broker web service unreachable, trying the next")
				failures = append(failures, fmt.Errorf("%s: %w", u.Host, err))
				continue
			}
			return nil, err
		}
		return t.follow(req, x, out, resp)
	}
	return nil, &upstreamError{status: http.StatusBadGateway, metric: reasonUnreachable,
		msg: fmt.Sprintf("no broker web service reachable (tried %d)", len(candidates)), err: joinFailures(failures)}
}

// joinFailures is one error naming each failure, "; " between them (errors.Join puts newlines
// into what becomes a one-line reason).
type joinedFailures []error

func joinFailures(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return joinedFailures(errs)
}

func (j joinedFailures) Error() string {
	msgs := make([]string, len(j))
	for i, err := range j {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "; ")
}

func (j joinedFailures) Unwrap() []error { return j }

// attempt is req for scheme://host, with the next body of the exchange.
func (t *redirector) attempt(req *http.Request, x *exchange, scheme, host string, loc *url.URL) (*http.Request, error) {
	out := req.Clone(req.Context())
	if loc != nil {
		u := *loc
		u.User = nil
		u.Fragment, u.RawFragment = "", ""
		out.URL = &u
	} else {
		out.URL.Scheme, out.URL.Host = scheme, host
	}
	out.Host = ""
	out.Body, out.GetBody = nil, nil
	if x.body != nil {
		ab, err := x.body.next(bodyWait)
		if errors.Is(err, errSpoolBudget) {
			t.p.metrics.rejected.WithLabelValues(rejectSpool).Inc()
			return nil, &upstreamError{status: http.StatusServiceUnavailable, retryAfter: spoolRetryAfter,
				msg: "the request was redirected, and its body cannot be sent again", err: err}
		}
		if err != nil {
			return nil, &upstreamError{status: http.StatusBadGateway, metric: reasonBodyNotKept,
				msg: "the request body could not be sent again after a redirect", err: err}
		}
		out.Body = ab
		out.GetBody = func() (io.ReadCloser, error) { return x.body.next(bodyWait) }
	}
	return out, nil
}

// follow follows the redirects of resp within the allowed web services.
func (t *redirector) follow(req *http.Request, x *exchange, out *http.Request, resp *http.Response) (*http.Response, error) {
	for {
		if resp.StatusCode != http.StatusTemporaryRedirect && resp.StatusCode != http.StatusPermanentRedirect {
			return resp, nil
		}
		where := resp.Header.Get("Location")
		if where == "" {
			return resp, nil // nothing to follow: the client sees what the broker said
		}
		discard(resp)
		loc, err := out.URL.Parse(where)
		if err != nil {
			return nil, &upstreamError{status: http.StatusBadGateway, metric: reasonBroken, msg: fmt.Sprintf("broker %s redirected to an unreadable Location %q", out.URL.Host, where)}
		}
		if x.redirect >= t.p.cfg.MaxRedirects {
			return nil, &upstreamError{status: http.StatusBadGateway, metric: reasonTooManyRedirect,
				msg: fmt.Sprintf("more than %d redirects (admin.maxRedirects); the last to %s", t.p.cfg.MaxRedirects, loc.Host)}
		}
		if !allowed(x.ups, loc) {
			t.p.cfg.Logger.Warn().Str("from", out.URL.Host).Str("location", loc.Scheme+"://"+loc.Host).Str("path", req.URL.Path).
				Msg("admin proxy: refused a redirect to a web service the live set does not list; not dialled")
			return nil, &upstreamError{status: http.StatusBadGateway, metric: reasonRedirectRefused,
				msg: fmt.Sprintf("broker %s redirected to %s://%s, which is not a broker web service this proxy knows; not followed", out.URL.Host, loc.Scheme, loc.Host)}
		}
		next, err := t.attempt(req, x, "", "", loc)
		if err != nil {
			return nil, err
		}
		x.redirect++
		x.last = loc.Host
		t.p.metrics.redirects.Inc()
		resp, err = t.base.RoundTrip(next)
		if err != nil {
			if isDialError(err) {
				return nil, &upstreamError{status: http.StatusBadGateway, metric: reasonUnreachable,
					msg: fmt.Sprintf("broker %s redirected to %s, which is unreachable", out.URL.Host, loc.Host), err: err}
			}
			return nil, err
		}
		out = next
	}
}

// allowed applies the upstreams' rule to a Location: http(s), no credentials, a host:port
// the set lists.
func allowed(ups Upstreams, loc *url.URL) bool {
	if (loc.Scheme != "http" && loc.Scheme != "https") || loc.User != nil || loc.Opaque != "" {
		return false
	}
	host, port := loc.Hostname(), loc.Port()
	if host == "" || port == "" {
		return false // brokers always name the port; an implied one is not a broker's
	}
	return ups.AllowWeb(loc.Scheme, host, port)
}

// discard reads a little of an answer that will not be used, so its connection can be reused,
// and closes it.
func discard(resp *http.Response) {
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
}

// isDialError reports an error of connecting, before anything of the request was sent.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
