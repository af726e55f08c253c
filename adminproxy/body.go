package adminproxy

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// Why a client's request body was cut off; the client gets 408 with the reason.
var (
	errClientStalled = errors.New("the client stopped sending its request body (admin.readTimeout)")
	errBodyTooSlow   = errors.New("the request body arrived slower than admin.minBodyRate")
)

// bodyReader reads a client's request body under two bounds: no single pause longer than
// pause (admin.readTimeout), and, after grace, no slower on average than minRate bytes a
// second (admin.minBodyRate). A deadline reset on every read alone lets a client hold its
// request (and its slot) for ever by sending a byte per pause; the average floor cuts it off
// once the time spent waiting for its body exceeds grace + bytes received / minRate.
//
// Only the time spent inside Read counts: while the broker is slow to take the body the
// proxy does not read, and the client is not charged for it (the rule of Kestrel's minimum
// data rate, which this follows).
type bodyReader struct {
	r       io.Reader
	rc      *http.ResponseController
	pause   time.Duration // 0: none
	minRate float64       // bytes a second; 0: no floor
	grace   time.Duration
	cut     func(error) // records why the body was cut off, for the answer

	waited time.Duration // spent in Read so far
	n      int64         // bytes read so far
}

func (b *bodyReader) Read(p []byte) (int, error) {
	now := time.Now()
	deadline, why := b.deadline(now)
	if !deadline.IsZero() {
		b.rc.SetReadDeadline(deadline)
	}
	n, err := b.r.Read(p)
	b.waited += time.Since(now)
	b.n += int64(n)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		b.cut(why)
		err = why
	}
	return n, err
}

// deadline is when the next read must have returned, and which bound that is.
func (b *bodyReader) deadline(now time.Time) (time.Time, error) {
	var deadline time.Time
	var why error
	if b.pause > 0 {
		deadline, why = now.Add(b.pause), errClientStalled
	}
	if b.minRate > 0 {
		allowed := b.grace + time.Duration(float64(b.n)/b.minRate*float64(time.Second))
		if d := now.Add(allowed - b.waited); deadline.IsZero() || d.Before(deadline) {
			deadline, why = d, errBodyTooSlow
		}
	}
	return deadline, why
}

// bodyCutReason is the reason a client whose body was cut off is given.
func bodyCutReason(err error, minRate float64, grace time.Duration) string {
	if errors.Is(err, errBodyTooSlow) {
		return fmt.Sprintf("%s (%.0f bytes a second after the first %s)", err, minRate, grace)
	}
	return err.Error()
}
