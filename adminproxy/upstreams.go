package adminproxy

import (
	"net"
	"strings"
	"sync/atomic"

	"github.com/pulsar-proxy/pulsar-proxy/internal/brokerhost"
)

// StaticUpstreams is a fixed list of web services (admin.functionWorkers), used round robin;
// a redirect may go to any of them and nowhere else.
type StaticUpstreams struct {
	urls []string
	next atomic.Uint64
}

// NewStaticUpstreams checks and canonicalizes the URLs (http(s)://host:port).
func NewStaticUpstreams(urls []string) (*StaticUpstreams, error) {
	s := &StaticUpstreams{}
	for _, raw := range urls {
		tls, host, port, err := brokerhost.ParseWebURL(raw)
		if err != nil {
			return nil, err
		}
		scheme := "http"
		if tls {
			scheme = "https"
		}
		s.urls = append(s.urls, scheme+"://"+net.JoinHostPort(host, port))
	}
	return s, nil
}

// WebURLs returns the list rotated by one per call.
func (s *StaticUpstreams) WebURLs() []string {
	n := len(s.urls)
	if n == 0 {
		return nil
	}
	start := int(s.next.Add(1) % uint64(n))
	out := make([]string, 0, n)
	for i := range n {
		out = append(out, s.urls[(start+i)%n])
	}
	return out
}

// AllowWeb reports whether scheme://host:port is in the list (host case-insensitive).
func (s *StaticUpstreams) AllowWeb(scheme, host, port string) bool {
	want := strings.ToLower(scheme) + "://" + net.JoinHostPort(strings.ToLower(host), port)
	for _, u := range s.urls {
		if u == want {
			return true
		}
	}
	return false
}
