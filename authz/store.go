package authz

import (
	"bytes"
	"context"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// PolicyStore holds the policy in force. Sessions read it for every decision, so a reload
// takes effect for the next command of every running session without touching the session.
type PolicyStore struct {
	cur     atomic.Pointer[Policy]
	path    string
	log     zerolog.Logger
	metrics *Metrics

	mu   sync.Mutex // one reload at a time
	last []byte     // contents of the file in force
}

// NewPolicyStore loads the policy file; an unreadable or invalid file is an error here, at
// start, where the operator sees it.
func NewPolicyStore(path string, m *Metrics, log zerolog.Logger) (*PolicyStore, error) {
	s := &PolicyStore{path: path, log: log, metrics: m}
	if _, err := s.reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// Policy returns the policy in force.
func (s *PolicyStore) Policy() *Policy { return s.cur.Load() }

// reload reads the file again. A file that fails to read or parse is reported and the
// policy in force is kept. It reports whether the policy changed.
func (s *PolicyStore) reload() (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := os.ReadFile(s.path)
	if err == nil && s.cur.Load() != nil && bytes.Equal(b, s.last) {
		return false, nil
	}
	var p *Policy
	if err == nil {
		p, err = ParsePolicy(b)
	}
	if err != nil {
		if s.metrics != nil {
			s.metrics.policyReloads.WithLabelValues("error").Inc()
		}
		return false, err
	}
	s.cur.Store(p)
	s.last = b
	if s.metrics != nil {
		s.metrics.policyReloads.WithLabelValues("ok").Inc()
	}
	return true, nil
}

// Watch reloads the file every interval when it changed, and at once on each value from
// hup (SIGHUP), until ctx ends. Failures are logged; the old policy stays.
func (s *PolicyStore) Watch(ctx context.Context, interval time.Duration, hup <-chan os.Signal) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-hup:
		}
		changed, err := s.reload()
		switch {
		case err != nil:
			s.log.Error().Err(err).Str("file", s.path).Msg("authorization policy not reloaded; keeping the one in force")
		case changed:
			s.log.Info().Str("file", s.path).Msg("authorization policy reloaded")
		}
	}
}
