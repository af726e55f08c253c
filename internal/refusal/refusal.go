// Package refusal tells the operator, through the log, that the proxy turns clients away,
// without letting a flood of refusals flood the log. The first refusal of a kind after a
// quiet interval is logged at once, with the client's address and what it was told; those
// that follow within the interval are counted, by detail, and summed up in one line per kind
// when the interval ends:
//
//	refused 1,200 clients in the last 10s: authentication_failed (bad_signature 1,100, expired 100)
//
// So a kind writes at most two lines per interval however many clients it refuses.
package refusal

import (
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/pulsar-proxy/pulsar-proxy/internal/jsonlog"
)

// Kind is what a refusal is about: the log's reason field. The set is fixed and small.
type Kind string

const (
	// AuthFailed: credentials refused (detail: the authn reason, e.g. bad_signature).
	AuthFailed Kind = "authentication_failed"
	// Denied: the authorization policy does not grant an action (detail: the action).
	Denied Kind = "denied"
	// BadFrame: a client that does not speak the protocol as it must (detail: what it did).
	BadFrame Kind = "bad_frame"
	// TLSOnPlaintext: a TLS ClientHello on a plaintext Pulsar listener: a client configured
	// with pulsar+ssl:// (or TLS on) pointed at the plaintext port.
	TLSOnPlaintext Kind = "tls_on_plaintext_port"
	// ConnectionLimit: a connection over one of the proxy's limits (detail: which).
	ConnectionLimit Kind = "connection_limit"
	// BrokerUnavailable: a direct session whose broker could not be reached or refused the
	// proxy's CONNECT (detail: the broker).
	BrokerUnavailable Kind = "broker_unavailable"
)

// level is how loud a kind is: warnings for what an operator acts on (clients that cannot
// get in, a broker that does not take them), info for the policy and the protocol doing
// their job.
func (k Kind) level() zerolog.Level {
	switch k {
	case Denied, BadFrame:
		return zerolog.InfoLevel
	}
	return zerolog.WarnLevel
}

// noun is what a kind refuses, for the summary's message.
func (k Kind) noun() string {
	if k == Denied {
		return "requests"
	}
	return "clients"
}

// maxDetails bounds the details counted per kind within an interval; the rest count as
// "other", so a client cannot grow the summary.
const maxDetails = 16

// Summary logs refusals as the package says. Safe for concurrent use; the zero value is not
// usable (New). A nil *Summary logs nothing.
type Summary struct {
	log      zerolog.Logger
	interval time.Duration
	now      func() time.Time

	mu     sync.Mutex
	kinds  map[Kind]*tally
	closed bool
}

// tally is one kind's refusals since its last line.
type tally struct {
	last    time.Time // when its last line was written
	n       uint64
	details map[string]uint64
	timer   *time.Timer // writes the summary; nil when nothing is counted
}

// New makes a Summary that writes to log and sums up every interval.
func New(log zerolog.Logger, interval time.Duration) *Summary {
	return &Summary{log: log, interval: interval, now: time.Now, kinds: map[Kind]*tally{}}
}

// Refused records one refusal of kind k: detail says which case of the kind (a bounded set:
// a reason, an action, a limit, a broker), remote is the client's address ("" when unknown)
// and told is what the client was told (or "").
func (s *Summary) Refused(k Kind, detail, remote, told string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	t := s.kinds[k]
	if t == nil {
		t = &tally{details: map[string]uint64{}}
		s.kinds[k] = t
	}
	now := s.now()
	if s.closed || (t.timer == nil && now.Sub(t.last) >= s.interval) {
		t.last = now
		s.mu.Unlock()
		s.one(k, detail, remote, told)
		return
	}
	t.n++
	switch _, ok := t.details[detail]; {
	case detail == "":
	case ok || len(t.details) < maxDetails:
		t.details[detail]++
	default:
		t.details["other"]++
	}
	if t.timer == nil {
		t.timer = time.AfterFunc(t.last.Add(s.interval).Sub(now), func() { s.flush(k) })
	}
	s.mu.Unlock()
}

// one logs a single refusal.
func (s *Summary) one(k Kind, detail, remote, told string) {
	ev := s.log.WithLevel(k.level()).Str("reason", string(k))
	if detail != "" {
		ev = ev.Str("detail", detail)
	}
	if remote != "" {
		ev = ev.Str("remote", remote)
	}
	if told != "" {
		ev = ev.Str("refusal", told)
	}
	msg := "refused a client: " + string(k)
	if k == Denied {
		msg = "denied a request"
	}
	if detail != "" {
		msg += " (" + detail + ")"
	}
	ev.Msg(msg)
}

// flush writes kind k's summary and starts its next interval.
func (s *Summary) flush(k Kind) {
	s.mu.Lock()
	t := s.kinds[k]
	n, details := t.n, t.details
	since := t.last
	t.n, t.details, t.timer, t.last = 0, map[string]uint64{}, nil, s.now()
	s.mu.Unlock()
	if n > 0 {
		s.summary(k, n, details, t.last.Sub(since))
	}
}

// Close writes what is counted and not yet summed up (at the proxy's stop); refusals after
// it are logged one by one.
func (s *Summary) Close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.closed = true
	var pending []Kind
	for k, t := range s.kinds {
		if t.timer != nil && t.timer.Stop() {
			pending = append(pending, k)
		}
	}
	s.mu.Unlock()
	sort.Slice(pending, func(i, j int) bool { return pending[i] < pending[j] })
	for _, k := range pending {
		s.flush(k)
	}
}

// summary writes one kind's line: the count, the interval, and the count of each detail,
// largest first.
func (s *Summary) summary(k Kind, n uint64, details map[string]uint64, over time.Duration) {
	names := make([]string, 0, len(details))
	for d := range details {
		names = append(names, d)
	}
	sort.Slice(names, func(i, j int) bool {
		if details[names[i]] != details[names[j]] {
			return details[names[i]] > details[names[j]]
		}
		return names[i] < names[j]
	})
	dict := zerolog.Dict()
	parts := make([]string, 0, len(names))
	for _, d := range names {
		dict = dict.Uint64(d, details[d])
		parts = append(parts, d+" "+Thousands(details[d]))
	}
	if over >= time.Second {
		over = over.Round(time.Second)
	} else {
		over = over.Round(time.Millisecond)
	}
	msg := "refused " + Thousands(n) + " " + k.noun() + " in the last " + over.String() + ": " + string(k)
	if len(parts) > 0 {
		msg += " (" + strings.Join(parts, ", ") + ")"
	}
	ev := s.log.WithLevel(k.level()).Str("reason", string(k)).Uint64("refused", n).Dict("details", dict)
	jsonlog.Seconds(ev, "interval", over).Msg(msg)
}

// Thousands writes n with a comma between each group of three digits: 1,234,567.
func Thousands(n uint64) string {
	s := strconv.FormatUint(n, 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
