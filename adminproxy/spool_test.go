package adminproxy

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// spoolBroker is a broker whose /admin/v2/hold answers only once release is called (the
// request's body stays spooled until then), and whose /admin/v2/redirect redirects to owner.
type spoolBroker struct {
	*broker
	owner *broker
}

func holdingBroker(t *testing.T) (brk spoolBroker, held <-chan struct{}, release func()) {
	t.Helper()
	hold, h := make(chan struct{}), make(chan struct{}, 1)
	var once sync.Once
	brk.owner = newBroker(t, nil)
	brk.broker = newBroker(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		switch r.URL.Path {
		case "/admin/v2/hold":
			h <- struct{}{}
			<-hold
		case "/admin/v2/redirect":
			redirectTo(brk.owner.host)(w, r, body)
			return
		}
		w.Write([]byte("{}"))
	})
	return brk, h, func() { once.Do(func() { close(hold) }) }
}

// Finding: request bodies were spooled to disk without a bound across requests (64 requests
// of 256 MiB against a 2 GiB /tmp). Now admin.maxSpooledBytes bounds them all: a body whose
// declared length no longer fits is refused up front with 503 and Retry-After, before any
// broker hears of it; a body of unknown length that runs the budget out still streams to the
// first broker, and only a redirect, which would need the copy, is refused the same way.
func TestSpoolBudgetRefusesWithRetryAfter(t *testing.T) {
	const mem, budget, size = 64 << 10, 1 << 20, 900 << 10
	brk, held, release := holdingBroker(t)
	defer release()
	tp := newProxy(t, Config{Brokers: static(t, brk.url(), brk.owner.url()), MaxBodySize: 8 << 20, memBody: mem, SpoolBudget: budget})
	tp.p.cfg.Brokers = pinned{static(t, brk.url(), brk.owner.url()), brk.url()}

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if code, body, _ := tp.do(t, "POST", "/admin/v2/hold", bytes.NewReader(make([]byte, size))); code != http.StatusOK {
			t.Errorf("the first body: %d %s", code, body)
		}
	}()
	<-held // size-mem of the budget is on disk now
	if got := counter(t, tp.reg, "pulsar_proxy_http_spool_bytes"); got != size-mem {
		t.Errorf("spooled bytes %v, want the body less its in-memory part, %d", got, size-mem)
	}
	if got := counter(t, tp.reg, "pulsar_proxy_http_spool_budget_bytes"); got != budget {
		t.Errorf("spool budget gauge %v, want %d", got, budget)
	}

	before := len(brk.requests())
	code, body, hdr := tp.do(t, "POST", "/admin/v2/declared", bytes.NewReader(make([]byte, size)))
	if code != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" || !strings.Contains(reasonOf(t, body), "admin.maxSpooledBytes") {
		t.Errorf("a declared body over what is left: %d %s (Retry-After %q)", code, body, hdr.Get("Retry-After"))
	}
	if n := len(brk.requests()); n != before {
		t.Errorf("the broker heard of the refused body")
	}
	chunked := func() io.Reader { return io.MultiReader(bytes.NewReader(make([]byte, size))) }
	if code, body, _ := tp.do(t, "POST", "/admin/v2/streamed", chunked()); code != http.StatusOK {
		t.Errorf("a chunked body over what is left, no redirect: %d %s", code, body)
	}
	if r := brk.requests(); r[len(r)-1].bodyLen != size {
		t.Errorf("the broker got %d bytes of the chunked body, want %d", r[len(r)-1].bodyLen, size)
	}
	code, body, hdr = tp.do(t, "POST", "/admin/v2/redirect", chunked())
	if code != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" || !strings.Contains(reasonOf(t, body), "admin.maxSpooledBytes") {
		t.Errorf("a chunked body over what is left, redirected: %d %s", code, body)
	}
	if got := counter(t, tp.reg, "pulsar_proxy_http_requests_rejected_total", "reason", rejectSpool); got != 2 {
		t.Errorf("rejected{spool_budget} = %v, want 2", got)
	}

	release()
	wg.Wait()
	if got := counter(t, tp.reg, "pulsar_proxy_http_spool_bytes"); got != 0 {
		t.Errorf("spooled bytes %v after every request ended", got)
	}
	if code, body, _ := tp.do(t, "POST", "/admin/v2/declared", bytes.NewReader(make([]byte, size))); code != http.StatusOK {
		t.Errorf("once the budget is given back: %d %s", code, body)
	}
}
