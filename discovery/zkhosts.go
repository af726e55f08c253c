package discovery

import (
	"errors"
	"slices"
	"sync"
)

// zkHosts hands the ZooKeeper client its servers as configured, names rather than the
// addresses they had at start (the client's own provider resolves them once): each dial
// resolves afresh, so servers that come back on new addresses (pods rescheduled) are found
// again, and a TLS dial checks the certificate against the name configured.
type zkHosts struct {
	mu         sync.Mutex
	servers    []string
	curr, last int
}

func (h *zkHosts) Init(servers []string) error {
	if len(servers) == 0 {
		return errors.New("no ZooKeeper server")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.servers = slices.Clone(servers)
	h.curr, h.last = -1, -1
	return nil
}

func (h *zkHosts) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.servers)
}

// Next is the next server to try; retryStart is true once every server was tried since the
// last successful connection (the client then waits a second before going round again).
func (h *zkHosts) Next() (server string, retryStart bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.curr = (h.curr + 1) % len(h.servers)
	retryStart = h.curr == h.last
	if h.last == -1 {
		h.last = 0
	}
	return h.servers[h.curr], retryStart
}

func (h *zkHosts) Connected() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.last = h.curr
}
