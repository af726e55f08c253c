package checkconfig

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/brokers"
	"github.com/pulsar-proxy/pulsar-proxy/discovery"
	"github.com/pulsar-proxy/pulsar-proxy/internal/app/proxy"
	"github.com/pulsar-proxy/pulsar-proxy/upstream"
)

// maxProbed bounds how many brokers --connect tries a CONNECT with.
const maxProbed = 16

// Connect runs discovery until every provider has answered or timeout passes, then opens a
// connection to each live broker (at most maxProbed) and completes its CONNECT, adding what
// it saw to r. It reports whether discovery named a broker and at least one completed its
// CONNECT.
func Connect(ctx context.Context, p *proxy.Probe, timeout time.Duration, r *Report) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var wg sync.WaitGroup
	runCtx, stop := context.WithCancel(ctx)
	for _, provider := range p.Providers {
		wg.Go(func() { provider.Run(runCtx) })
	}
	defer func() { stop(); wg.Wait() }()

	// Discovery: wait for every provider's first answer (a static list has one at once); past
	// the deadline, go on with what the others found.
	for !allAnswered(p.Providers) && ctx.Err() == nil {
		sleep(ctx, 100*time.Millisecond)
	}
	for _, provider := range p.Providers {
		key := "discovery." + provider.Name()
		if bs := provider.Brokers(); len(bs) > 0 {
			r.add(Info, key, "%d broker(s): %s", len(bs), urls(bs))
		} else {
			r.add(Warning, key, "no broker within %s", timeout)
		}
	}
	live := p.Brokers.Brokers()
	if len(live) == 0 {
		_, why := p.Brokers.Ready()
		r.add(Error, "discovery", "%s", why)
		return false
	}
	if len(live) > maxProbed {
		r.add(Info, "broker", "%d brokers: trying the first %d", len(live), maxProbed)
		live = live[:maxProbed]
	}

	ok := connectAll(ctx, p, live, r)
	if ok == 0 {
		r.add(Error, "broker", "no broker completed a CONNECT (%d tried)", len(live))
		return false
	}
	return true
}

// connectAll completes a CONNECT with every broker, concurrently, within what is left of
// ctx, and reports each; it returns how many succeeded.
func connectAll(ctx context.Context, p *proxy.Probe, live []brokers.Broker, r *Report) int {
	results := make([]error, len(live))
	versions := make([]string, len(live))
	var probes sync.WaitGroup
	for i, b := range live {
		probes.Go(func() {
			conn, err := p.Open(ctx, b.Addr())
			if err != nil {
				results[i] = err
				return
			}
			c := conn.Connected
			versions[i] = fmt.Sprintf("server %q, protocol version %d", c.GetServerVersion(), c.GetProtocolVersion())
			conn.Close()
		})
	}
	probes.Wait()
	ok := 0
	for i, b := range live {
		key := "broker " + b.URL
		if err := results[i]; err != nil {
			r.add(Warning, key, "CONNECT failed: %s", describe(err))
			continue
		}
		ok++
		r.add(Info, key, "CONNECTED (%s)", versions[i])
	}
	return ok
}

// describe says what kind of failure err is, in the proxy's own terms.
func describe(err error) string {
	var de *upstream.DialError
	var be *upstream.BrokerError
	switch {
	case errors.As(err, &be):
		return fmt.Sprintf("the broker refused it: %v %s", be.Code, be.Message)
	case upstream.CertificateRefused(err):
		return "the broker's certificate was refused: " + err.Error()
	case errors.As(err, &de):
		return "unreachable: " + err.Error()
	}
	return err.Error()
}

// allAnswered reports whether every provider has a broker list (one that cannot be reached
// never has: Connect then waits for its time-out).
func allAnswered(ps []discovery.Provider) bool {
	for _, p := range ps {
		if len(p.Brokers()) == 0 {
			return false
		}
	}
	return true
}

func urls(bs []brokers.Broker) string {
	s := make([]string, len(bs))
	for i, b := range bs {
		s[i] = b.URL
	}
	return strings.Join(s, ", ")
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
