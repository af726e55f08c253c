package authn

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/GehirnInc/crypt/apr1_crypt"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// methodBasic is Pulsar's name of user and password authentication.
const methodBasic = "basic"

// ReasonBadCredentials: an unknown user or a wrong password (which of the two is not told).
const ReasonBadCredentials Reason = "bad_credentials"

// BasicProvider authenticates a user and a password (auth method "basic") against the
// credentials file Pulsar's AuthenticationProviderBasic reads (its basicAuthConf): one
// user:hash per line, the hash Apache's MD5 ($apr1$..., htpasswd -m). The file is re-read
// when it changes (Watch); one that fails to read or parse is reported and the users in
// force are kept.
type BasicProvider struct {
	path    string
	log     zerolog.Logger
	metrics *BasicMetrics
	users   atomic.Pointer[map[string]string]

	mu   sync.Mutex // one reload at a time
	last []byte
}

// NewBasicProvider loads the credentials file; an unreadable or invalid file is an error
// here, at start. m may be nil (not counted).
func NewBasicProvider(path string, m *BasicMetrics, log zerolog.Logger) (*BasicProvider, error) {
	p := &BasicProvider{path: path, metrics: m, log: log}
	if _, err := p.reload(); err != nil {
		return nil, err
	}
	return p, nil
}

// Method is "basic", as Pulsar clients name it.
func (*BasicProvider) Method() string { return methodBasic }

// Authenticate checks user:password (the CONNECT's auth_data, or the HTTP Basic header
// decoded), split as Pulsar splits it: exactly one ':' between two parts.
func (p *BasicProvider) Authenticate(c Credentials) (Identity, error) {
	parts := javaSplit(string(c.Data), ":")
	if len(parts) != 2 {
		return Identity{}, &Error{Method: methodBasic, Reason: ReasonMalformed, Detail: "credentials are not user:password"}
	}
	user, password := parts[0], parts[1]
	hash, ok := (*p.users.Load())[user]
	if !ok || !verifyHash(hash, password) {
		return Identity{}, &Error{Method: methodBasic, Reason: ReasonBadCredentials, Detail: "Unknown user or invalid password"}
	}
	return Identity{Role: user, Method: methodBasic}, nil
}

// verifyHash checks password against one line's hash.
func verifyHash(hash, password string) bool {
	if strings.HasPrefix(hash, "$apr1") {
		// Pulsar checks the hash has four '$'-separated parts, then re-hashes with its salt.
		if len(strings.Split(hash, "$")) != 4 {
			return false
		}
		return apr1_crypt.New().Verify(hash, []byte(password)) == nil
	}
	return false // crypt(3) DES hashes: see unsupportedHashes
}

// unsupportedHashes names the users whose hash is not Apache's MD5: Pulsar also takes
// crypt(3)'s traditional DES hash (13 characters), which the proxy does not, so they cannot
// authenticate through it (a warning at each load says whom to re-hash with htpasswd -m).
func unsupportedHashes(users map[string]string) []string {
	var out []string
	for u, h := range users {
		if !strings.HasPrefix(h, "$apr1") {
			out = append(out, u)
		}
	}
	slices.Sort(out)
	return out
}

// parseBasicFile reads a credentials file as Pulsar does: every line user:hash, split on ':'
// into exactly two parts (a blank line, or a third part, makes the file invalid).
func parseBasicFile(b []byte) (map[string]string, error) {
	users := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	n := 0
	for sc.Scan() {
		n++
		parts := javaSplit(strings.TrimSuffix(sc.Text(), "\r"), ":")
		if len(parts) != 2 {
			return nil, fmt.Errorf("line %d: not user:hash (the format of Pulsar's basicAuthConf)", n)
		}
		users[parts[0]] = parts[1]
	}
	return users, sc.Err()
}

// javaSplit splits as Java's String.split(sep) does: trailing empty parts are dropped.
func javaSplit(s, sep string) []string {
	parts := strings.Split(s, sep)
	for len(parts) > 1 && parts[len(parts)-1] == "" {
		parts = parts[:len(parts)-1]
	}
	return parts
}

// reload reads the file again; it reports whether the users changed.
func (p *BasicProvider) reload() (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, err := os.ReadFile(p.path)
	if err == nil && p.users.Load() != nil && bytes.Equal(b, p.last) {
		return false, nil
	}
	var users map[string]string
	if err == nil {
		users, err = parseBasicFile(b)
	}
	if err != nil {
		p.metrics.reloaded(false, 0)
		return false, fmt.Errorf("%s: %w", p.path, err)
	}
	if bad := unsupportedHashes(users); len(bad) > 0 {
		p.log.Warn().Strs("users", bad).Str("file", p.path).Msg("basic authentication: these users' hashes are not Apache MD5 ($apr1$, htpasswd -m); they cannot authenticate through the proxy until re-hashed")
	}
	p.users.Store(&users)
	p.last = b
	p.metrics.reloaded(true, len(users))
	return true, nil
}

// Watch re-reads the file every interval when it changed, until ctx ends. Failures are
// logged; the users in force stay.
func (p *BasicProvider) Watch(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		changed, err := p.reload()
		switch {
		case err != nil:
			p.log.Error().Err(err).Msg("basic authentication credentials not reloaded; keeping the ones in force")
		case changed:
			p.log.Info().Str("file", p.path).Msg("basic authentication credentials reloaded")
		}
	}
}

// BasicMetrics counts the credentials file's reloads and its users.
type BasicMetrics struct {
	reloads *prometheus.CounterVec
	users   prometheus.Gauge
}

// NewBasicMetrics registers the basic authentication metrics with reg (only when it is on).
func NewBasicMetrics(reg prometheus.Registerer) *BasicMetrics {
	m := &BasicMetrics{
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulsar_proxy_basic_auth_reloads_total",
			Help: "Loads of the basic authentication credentials file (auth.basic.credentialsFile), by result (ok, error: the users in force are kept).",
		}, []string{"result"}),
		users: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pulsar_proxy_basic_auth_users",
			Help: "Users in the basic authentication credentials in force.",
		}),
	}
	reg.MustRegister(m.reloads, m.users)
	m.reloads.WithLabelValues("ok")
	m.reloads.WithLabelValues("error")
	return m
}

func (m *BasicMetrics) reloaded(ok bool, users int) {
	if m == nil {
		return
	}
	if !ok {
		m.reloads.WithLabelValues("error").Inc()
		return
	}
	m.reloads.WithLabelValues("ok").Inc()
	m.users.Set(float64(users))
}
