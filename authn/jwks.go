package authn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// maxJWKSSize bounds a key set document; real ones are a few KiB.
const maxJWKSSize = 1 << 20

// JWKSConfig says where an identity provider publishes its keys and how often to ask.
type JWKSConfig struct {
	URL                string
	RefreshInterval    time.Duration // periodic fetch
	MinRefetchInterval time.Duration // at most one fetch per interval for unknown kids, and the retry delay after a failure
	Timeout            time.Duration // one fetch
	CAFile             string        // PEM roots for the provider's TLS; "": the system's
}

// JWKS holds an identity provider's current signature keys. Run keeps them fresh; a token
// with a kid not in the set makes Key fetch the set again, rate limited. A failed fetch keeps
// the last good set.
type JWKS struct {
	cfg     JWKSConfig
	client  *http.Client
	metrics *JWKSMetrics
	log     zerolog.Logger
	now     func() time.Time

	keys atomic.Pointer[keySet]

	fetchMu     sync.Mutex // one fetch at a time; guards the fields below
	lastAttempt time.Time
	lastErr     error
}

// NewJWKS checks the configuration; it fetches nothing (Run does, so a provider that is down
// does not stop the proxy from starting).
func NewJWKS(cfg JWKSConfig, m *JWKSMetrics, log zerolog.Logger) (*JWKS, error) {
	if cfg.URL == "" {
		return nil, errors.New("no JWKS URL")
	}
	if cfg.RefreshInterval <= 0 || cfg.MinRefetchInterval <= 0 || cfg.Timeout <= 0 {
		return nil, errors.New("JWKS intervals and timeout must be positive")
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, err
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s: no PEM certificate", cfg.CAFile)
		}
		tr.TLSClientConfig.RootCAs = roots
	}
	// Never follow a redirect off to another scheme or host silently: the URL is the trust.
	client := &http.Client{Transport: tr, Timeout: cfg.Timeout, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
	return &JWKS{cfg: cfg, client: client, metrics: m, log: log.With().Str("jwks", cfg.URL).Logger(), now: time.Now}, nil
}

// Run fetches the key set at once, then every RefreshInterval (MinRefetchInterval after a
// failure), until ctx ends.
func (s *JWKS) Run(ctx context.Context) {
	defer s.client.CloseIdleConnections()
	for trigger := "start"; ; trigger = "periodic" {
		next := s.cfg.RefreshInterval
		if err := s.refresh(ctx, trigger); err != nil {
			next = s.cfg.MinRefetchInterval
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(next):
		}
	}
}

// keyFor returns the key of kid, fetching the set again when kid is unknown and the last fetch
// is at least MinRefetchInterval old. Its errors are *Error for the client.
func (s *JWKS) keyFor(kid string) (verifyKey, error) {
	if k, ok := s.keys.Load().lookup(kid); ok {
		return k, nil
	}
	s.fetchMu.Lock()
	defer s.fetchMu.Unlock()
	// Another caller may have fetched while this one waited.
	if k, ok := s.keys.Load().lookup(kid); ok {
		return k, nil
	}
	if s.now().Sub(s.lastAttempt) >= s.cfg.MinRefetchInterval {
		s.fetchLocked(context.Background(), "unknown_kid")
		if k, ok := s.keys.Load().lookup(kid); ok {
			return k, nil
		}
	}
	return verifyKey{}, s.unknownKey(kid)
}

func (s *JWKS) unknownKey(kid string) *Error {
	e := &Error{Method: methodToken, Reason: ReasonUnknownKey}
	switch {
	case s.keys.Load() == nil:
		e.Detail = "the identity provider's keys are not available yet"
	case kid == "":
		e.Detail = "token has no kid and the key set has several keys"
	default:
		e.Detail = fmt.Sprintf("no key %q in the identity provider's key set", kid)
	}
	return e
}

// refresh is Run's fetch.
func (s *JWKS) refresh(ctx context.Context, trigger string) error {
	s.fetchMu.Lock()
	defer s.fetchMu.Unlock()
	return s.fetchLocked(ctx, trigger)
}

// fetchLocked fetches and installs the key set; on failure the set in force stays.
func (s *JWKS) fetchLocked(ctx context.Context, trigger string) error {
	s.lastAttempt = s.now()
	set, skipped, err := s.fetch(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.metrics.fetched(false, nil)
			s.logFailure(err, trigger)
		}
		s.lastErr = err
		return err
	}
	old := s.keys.Swap(set)
	s.metrics.fetched(true, set)
	if s.lastErr != nil || !slices.Equal(old.kids(), set.kids()) {
		ev := s.log.Info().Strs("kids", set.kids()).Str("trigger", trigger)
		for _, sk := range skipped {
			ev = ev.AnErr("skipped", sk)
		}
		ev.Msg("JWKS key set loaded")
	}
	s.lastErr = nil
	return nil
}

// logFailure logs a failed fetch at error level when it starts or its error changes, and
// repeats of the same error at debug: an outage retried every few seconds should not flood
// the log (the fetches metric counts every one).
func (s *JWKS) logFailure(err error, trigger string) {
	ev := s.log.Error()
	if s.lastErr != nil && s.lastErr.Error() == err.Error() {
		ev = s.log.Debug()
	}
	ev = ev.Err(err).Str("trigger", trigger)
	if s.keys.Load() == nil {
		ev.Msg("JWKS fetch failed; token clients are refused until the key set arrives")
		return
	}
	ev.Msg("JWKS fetch failed; keeping the last key set")
}

func (s *JWKS) fetch(ctx context.Context) (*keySet, []error, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.cfg.URL, nil)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Accept", "application/json, application/jwk-set+json")
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("HTTP status %s", resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSSize+1))
	if err != nil {
		return nil, nil, err
	}
	if len(b) > maxJWKSSize {
		return nil, nil, fmt.Errorf("key set larger than %d bytes", maxJWKSSize)
	}
	return parseJWKS(b)
}
