package adminproxy

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// Advertised are the URLs of the proxy's own listeners as a client reaches them, which an
// HTTP lookup answers with instead of the owning broker's: the client then connects to the
// proxy, names no broker (no proxy_to_broker_url), and the proxy routes its producers and
// consumers to each topic's owner (a routed session). "" where that listener is off: the
// answer then carries no URL of that kind.
type Advertised struct {
	Pulsar    string // pulsar://host:port of listen.pulsar
	PulsarTLS string // pulsar+ssl://host:port of listen.pulsarTLS
	HTTP      string // http://host:port of listen.http
	HTTPS     string // https://host:port of admin.listenHTTPS
}

// maxLookupBody bounds a broker's lookup answer read to be rewritten (a few URLs).
const maxLookupBody = 64 << 10

// isTopicLookup reports whether path is an HTTP topic lookup whose answer names a broker
// (Pulsar's LookupData): /lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic} and the
// older /lookup/v2/destination/{domain}/{property}/{cluster}/{namespace}/{topic}. The
// .../bundle form answers a bundle range and is left as it is.
func isTopicLookup(path string) bool {
	rest, ok := strings.CutPrefix(path, "/lookup/v2/")
	if !ok {
		return false
	}
	segs := strings.Split(strings.TrimSuffix(rest, "/"), "/")
	switch {
	case segs[0] == "topic" && len(segs) == 5:
	case segs[0] == "destination" && len(segs) == 6:
	default:
		return false
	}
	return segs[1] == "persistent" || segs[1] == "non-persistent"
}

// lookupFields are the answer's fields that name where to connect, each with the advertised
// URL that replaces it. nativeUrl is the binary URL's old name.
func lookupFields(a Advertised) map[string]string {
	return map[string]string{
		"brokerUrl": a.Pulsar, "nativeUrl": a.Pulsar, "brokerUrlTls": a.PulsarTLS,
		"httpUrl": a.HTTP, "httpUrlTls": a.HTTPS,
	}
}

// rewriteLookup is part of the ReverseProxy's ModifyResponse: a successful topic lookup is
// answered with the proxy's own URLs (Advertised), never the broker's, so that a client
// that looks topics up over HTTP connects to the proxy and only to it. An answer that cannot
// be read as a lookup is not passed on (it would send the client to a broker).
func (p *Proxy) rewriteLookup(resp *http.Response) error {
	if p.cfg.Advertise == nil || resp.StatusCode/100 != 2 || !isTopicLookup(resp.Request.URL.Path) {
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxLookupBody+1))
	resp.Body.Close()
	var answer map[string]json.RawMessage
	if err != nil || len(b) > maxLookupBody || json.Unmarshal(b, &answer) != nil {
		return &upstreamError{status: http.StatusBadGateway, metric: reasonBroken, msg: "the broker's lookup answer could not be read to name the proxy in it"}
	}
	// The client's request as it came (resp.Request is the one sent to the broker).
	in := resp.Request
	if x := exchangeOf(in.Context()); x != nil && x.in != nil {
		in = x.in
	}
	for field, url := range lookupFields(p.cfg.Advertise(in)) {
		delete(answer, field)
		if url != "" {
			answer[field], _ = json.Marshal(url)
		}
	}
	out, _ := json.Marshal(answer)
	resp.Body = io.NopCloser(bytes.NewReader(out))
	resp.ContentLength = int64(len(out))
	resp.Header.Set("Content-Length", strconv.Itoa(len(out)))
	resp.Header.Del("Content-Encoding")
	return nil
}
