package adminproxy

import (
	"net"
	"net/http"
	"net/netip"
	"sync"

	"github.com/pulsar-proxy/pulsar-proxy/authn"
	"github.com/pulsar-proxy/pulsar-proxy/internal/connlimit"
)

// slots bounds the admin requests served at once: in all (MaxConcurrent) and per principal
// (MaxConcurrentPerPrincipal), so that one principal's slow requests cannot keep every other
// one's at 429. A slot is taken once the client is authenticated, so a request waiting on
// authentication holds none (a slow identity provider cannot fill them). Such requests are
// bounded otherwise: a connection carries one request at a time (HTTP/1.1 only, no HTTP/2 is
// offered), so per client address by the HTTP listener's session.maxConnectionsPerIP, in all
// by the listener's part of the descriptor budget; and in time by auth.token.jwksTimeout, since
// a key set is fetched once for all the requests waiting on it (authn.JWKS.keyFor: one fetch
// at a time, at most one per jwksMinRefetchInterval, the others then answered at once).
type slots struct {
	all    chan struct{}
	perKey int

	mu   sync.Mutex
	held map[string]int // by principal key; only keys holding a slot, so at most cap(all)
}

func newSlots(all, perKey int) *slots {
	if perKey <= 0 || perKey > all {
		perKey = all
	}
	return &slots{all: make(chan struct{}, all), perKey: perKey, held: map[string]int{}}
}

// Which limit refused a request: a label of pulsar_proxy_http_requests_rejected_total.
const (
	rejectConcurrency = "concurrency"
	rejectPrincipal   = "concurrency_per_principal"
	rejectBodyRate    = "body_rate"
	rejectSpool       = "spool_budget"
)

// take takes a slot for key; refused names the limit that refused it ("": taken, and
// release gives it back).
func (s *slots) take(key string) (release func(), refused string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held[key] >= s.perKey {
		return nil, rejectPrincipal
	}
	select {
	case s.all <- struct{}{}:
	default:
		return nil, rejectConcurrency
	}
	s.held[key]++
	return func() { s.give(key) }, ""
}

func (s *slots) give(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held[key] <= 1 {
		delete(s.held, key)
	} else {
		s.held[key]--
	}
	<-s.all
}

// principalKey is who a request's slots are counted against: the authenticated role, or,
// for a client with none (authentication off, or the anonymous role, which every such client
// shares), its address (an IPv6 client by its prefix of v6Prefix bits). The key is for the
// count only; who says what the refusal names.
func principalKey(r *http.Request, id authn.Identity, authed bool, v6Prefix int) (key, who string) {
	if authed && id.Method != "anonymous" {
		return "role:" + id.Role, "principal " + id.Role
	}
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return "addr:" + r.RemoteAddr, "your address"
	}
	ip, _ := connlimit.Key(net.TCPAddrFromAddrPort(ap), v6Prefix)
	return "addr:" + ip.String(), "your address"
}
