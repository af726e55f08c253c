package adminproxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
)

// maxTopicListBody bounds an answer the proxy reads whole to filter: a namespace's topic
// names (a million names of 64 bytes).
const maxTopicListBody = 64 << 20

var errTopicListUnreadable = errors.New("the broker's topic list could not be read to filter it")

// modifyResponse is the ReverseProxy's ModifyResponse hook: topic lists filtered, lookups
// answered with the proxy's URLs.
func (p *Proxy) modifyResponse(resp *http.Response) error {
	if err := p.filterTopicList(resp); err != nil {
		return err
	}
	return p.rewriteLookup(resp)
}

// filterTopicList is part of the ReverseProxy's ModifyResponse: a successful answer to a route
// whose answer lists topic names (the edge said so) is cut to the names the role may look
// up, as a binary GET_TOPICS_OF_NAMESPACE answer is. An answer that cannot be read as a list
// of names is not passed on (it might name what the role may not see).
func (p *Proxy) filterTopicList(resp *http.Response) error {
	x := exchangeOf(resp.Request.Context())
	if x == nil || !x.decision.FilterTopics || p.cfg.Policy == nil || resp.StatusCode/100 != 2 {
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxTopicListBody+1))
	resp.Body.Close()
	var names []string
	if err != nil || len(b) > maxTopicListBody || json.Unmarshal(b, &names) != nil {
		return &upstreamError{status: http.StatusBadGateway, metric: reasonBroken, msg: errTopicListUnreadable.Error()}
	}
	kept := names[:0]
	for _, n := range names {
		if p.cfg.Policy.Visible(x.identity, n) {
			kept = append(kept, n)
		}
	}
	out, _ := json.Marshal(kept)
	resp.Body = io.NopCloser(bytes.NewReader(out))
	resp.ContentLength = int64(len(out))
	resp.Header.Set("Content-Length", strconv.Itoa(len(out)))
	resp.Header.Del("Content-Encoding")
	return nil
}
