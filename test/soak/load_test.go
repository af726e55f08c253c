//go:build soak

package soak

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/golang-jwt/jwt/v5"
)

// tokenTTL is the life of every client token: long-lived sessions are challenged by the proxy
// (AUTH_CHALLENGE) and renew through their supplier every tokenTTL.
const tokenTTL = 20 * time.Second

// endpoint is how load clients reach the proxy: its plaintext or TLS URL, the CA that signs
// its certificate, and the key their tokens are signed with.
type endpoint struct {
	plainURL, tlsURL, caFile string
	secret                   []byte
}

// newClient opens a client whose token supplier mints a fresh tokenTTL token on each call.
func (e endpoint) newClient(useTLS bool) (pulsar.Client, error) {
	opts := pulsar.ClientOptions{URL: e.plainURL, OperationTimeout: 30 * time.Second, ConnectionTimeout: 10 * time.Second,
		Logger: plog.DefaultNopLogger(), Authentication: pulsar.NewAuthenticationTokenFromSupplier(e.token)}
	if useTLS {
		opts.URL, opts.TLSTrustCertsFilePath = e.tlsURL, e.caFile
	}
	return pulsar.NewClient(opts)
}

func (e endpoint) token() (string, error) {
	claims := jwt.MapClaims{"sub": "soak", "exp": time.Now().Add(tokenTTL).Unix()}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(e.secret)
}

// tally counts what the load did and keeps the first errors it met.
type tally struct {
	clients, tlsClients, producers, lookups atomic.Int64
	mu                                      sync.Mutex
	errs                                    int
	firstErrs                               []string
}

func (t *tally) fail(what string, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.errs++
	if len(t.firstErrs) < 10 {
		t.firstErrs = append(t.firstErrs, fmt.Sprintf("%s %s: %v", time.Now().UTC().Format("15:04:05"), what, err))
	}
}

func (t *tally) errors() (int, []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.errs, append([]string(nil), t.firstErrs...)
}

// flow is a producer and a consumer on one topic for the whole run, on one long-lived client:
// every message the producer has acknowledged must reach the consumer.
type flow struct {
	topic    string
	useTLS   bool
	mu       sync.Mutex
	acked    []bool // by sequence number
	received []bool
	nAcked   int
	nRecv    int // acked or not yet acked: the receive can come before the ack returns
}

func (f *flow) mark(list *[]bool, count *int, seq int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(*list) <= seq {
		*list = append(*list, false)
	}
	if !(*list)[seq] {
		(*list)[seq] = true
		*count++
	}
}

// missing is how many acknowledged messages the consumer has not received (yet).
func (f *flow) missing() (acked, missing int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for seq, a := range f.acked {
		if a && (seq >= len(f.received) || !f.received[seq]) {
			missing++
		}
	}
	return f.nAcked, missing
}

// run produces at rate until load ends, consuming until drained ends.
func (f *flow) run(e endpoint, rate int, load, drained context.Context, t *tally) error {
	c, err := e.newClient(f.useTLS)
	if err != nil {
		return err
	}
	defer c.Close()
	cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: f.topic, SubscriptionName: "soak", Type: pulsar.Shared})
	if err != nil {
		return err
	}
	defer cons.Close()
	prod, err := c.CreateProducer(pulsar.ProducerOptions{Topic: f.topic})
	if err != nil {
		return err
	}
	defer prod.Close()
	done := make(chan struct{})
	go func() { defer close(done); f.consume(cons, drained, t) }()
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for seq := 0; load.Err() == nil; seq++ {
		select {
		case <-load.Done():
		case <-tick.C:
			payload := binary.BigEndian.AppendUint64(nil, uint64(seq))
			ctx, cancel := context.WithTimeout(drained, 30*time.Second)
			if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: payload}); err != nil {
				t.fail("send on "+f.topic, err)
			} else {
				f.mark(&f.acked, &f.nAcked, seq)
			}
			cancel()
		}
	}
	<-done
	return nil
}

func (f *flow) consume(cons pulsar.Consumer, drained context.Context, t *tally) {
	for {
		m, err := cons.Receive(drained)
		if err != nil {
			if drained.Err() == nil {
				t.fail("receive on "+f.topic, err)
			}
			return
		}
		if len(m.Payload()) == 8 {
			f.mark(&f.received, &f.nRecv, int(binary.BigEndian.Uint64(m.Payload())))
		}
		cons.Ack(m)
	}
}

// churn opens a client every interval until ctx ends, does one thing with it and closes it.
func churn(ctx context.Context, interval time.Duration, t *tally, what string, once func() error) {
	for ctx.Err() == nil {
		began := time.Now()
		if err := once(); err != nil && ctx.Err() == nil {
			t.fail(what, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(interval - time.Since(began)):
		}
	}
}

// produceOnce is one churned client: a lookup, a producer, one message, then close.
func produceOnce(e endpoint, useTLS bool, topic string, t *tally) error {
	c, err := e.newClient(useTLS)
	if err != nil {
		return err
	}
	defer c.Close()
	if useTLS {
		t.tlsClients.Add(1)
	} else {
		t.clients.Add(1)
	}
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		return err
	}
	defer p.Close()
	t.producers.Add(1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("churn")})
	return err
}

// lookupOnce is one churned client that asks for a partitioned topic's partitions only
// (PARTITIONED_METADATA on a lookup-mode connection).
func lookupOnce(e endpoint, topic string, want int, t *tally) error {
	c, err := e.newClient(false)
	if err != nil {
		return err
	}
	defer c.Close()
	t.clients.Add(1)
	parts, err := c.TopicPartitions(topic)
	if err != nil {
		return err
	}
	t.lookups.Add(1)
	if len(parts) != want {
		return errors.New(fmt.Sprint("got partitions ", parts, ", want ", want))
	}
	return nil
}
