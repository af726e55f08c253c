package e2efault

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsar/backoff"
	"github.com/pulsar-proxy/pulsar-proxy/test/wait"
)

// flow is a producer and a consumer of one topic under steady load, recording every
// acknowledged message and every received one, so that a fault can be checked for loss: each
// message the broker acknowledged must reach the consumer.
type flow struct {
	name  string
	topic string
	prod  pulsar.Producer
	cons  pulsar.Consumer

	mu       sync.Mutex
	acked    map[int]time.Time
	received map[int]time.Time
	dups     int
	failed   int // sends that ended in an error (never acknowledged: not counted as loss)
	sent     int

	stop      chan struct{}
	sending   chan struct{} // closed when the send loop has returned
	done      sync.WaitGroup
	closeOnce sync.Once
	stopOnce  sync.Once
}

// startFlow subscribes to topic, then sends rate messages per second until stopSending.
// retry, when not 0, makes the producer and consumer reconnect at that steady pace instead of
// the client's doubling backoff (100 ms to 60 s, with jitter).
func startFlow(t *testing.T, name string, c pulsar.Client, topic string, rate int, retry time.Duration) *flow {
	t.Helper()
	var policy func() backoff.Policy
	if retry > 0 {
		policy = func() backoff.Policy { return steadyBackoff(retry) }
	}
	cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "check",
		Type: pulsar.Shared, SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, BackOffPolicyFunc: policy})
	if err != nil {
		t.Fatalf("%s: subscribe: %v", name, err)
	}
	prod, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, SendTimeout: 2 * time.Minute,
		DisableBatching: true, BackOffPolicyFunc: policy})
	if err != nil {
		t.Fatalf("%s: producer: %v", name, err)
	}
	f := &flow{name: name, topic: topic, prod: prod, cons: cons, acked: map[int]time.Time{},
		received: map[int]time.Time{}, stop: make(chan struct{}), sending: make(chan struct{})}
	f.done.Add(1)
	go f.receive()
	go f.send(rate)
	t.Cleanup(f.close)
	return f
}

// close stops the flow and closes its producer and consumer (once).
func (f *flow) close() {
	f.closeOnce.Do(func() {
		f.stopSending()
		f.prod.Close()
		f.cons.Close()
	})
}

// steadyBackoff retries at one pace.
type steadyBackoff time.Duration

func (b steadyBackoff) Next() time.Duration       { return time.Duration(b) }
func (b steadyBackoff) IsMaxBackoffReached() bool { return false }
func (b steadyBackoff) Reset()                    {}

func (f *flow) send(rate int) {
	defer close(f.sending)
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-f.stop:
			return
		case <-tick.C:
		}
		seq := i
		f.mu.Lock()
		f.sent++
		f.mu.Unlock()
		f.prod.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("%s-%09d", f.name, seq))},
			func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				f.mu.Lock()
				defer f.mu.Unlock()
				if err != nil {
					f.failed++
					return
				}
				f.acked[seq] = time.Now()
			})
	}
}

func (f *flow) receive() {
	defer f.done.Done()
	for {
		m, err := f.cons.Receive(context.Background())
		if err != nil {
			return // the consumer was closed
		}
		var seq int
		fmt.Sscanf(string(m.Payload()[len(f.name)+1:]), "%d", &seq)
		f.mu.Lock()
		if _, seen := f.received[seq]; seen {
			f.dups++
		} else {
			f.received[seq] = time.Now()
		}
		f.mu.Unlock()
		f.cons.Ack(m)
	}
}

// stopSending stops the producer's loop and, once it has returned (a send it was starting
// would otherwise come after the flush, and fail as the producer closes), flushes what is
// pending.
func (f *flow) stopSending() {
	f.stopOnce.Do(func() {
		close(f.stop)
		<-f.sending
		f.prod.Flush()
	})
}

// ackedSince reports whether a message was acknowledged after t.
func (f *flow) ackedSince(t time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, at := range f.acked {
		if at.After(t) {
			return true
		}
	}
	return false
}

// receivedSince reports whether a message sent after t's outage was received after t.
func (f *flow) receivedSince(t time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, at := range f.received {
		if at.After(t) {
			return true
		}
	}
	return false
}

// flowResult is what a flow measured.
type flowResult struct {
	sent, acked, received, lost, dups, failed int
	ackGap, receiveGap                        time.Duration // the longest time without an ack (a receive) after from
}

func (r flowResult) String() string {
	return fmt.Sprintf("sent %d, acknowledged %d, received %d, acknowledged but lost %d, duplicates %d, send errors %d; longest gap without an ack %s, without a receive %s",
		r.sent, r.acked, r.received, r.lost, r.dups, r.failed, r.ackGap.Round(10*time.Millisecond), r.receiveGap.Round(10*time.Millisecond))
}

// finish stops sending, waits (up to a minute) until every acknowledged message has arrived,
// and reports; the gaps are measured over the times after from.
func (f *flow) finish(t *testing.T, from time.Time) flowResult {
	t.Helper()
	f.stopSending()
	wait.Within(time.Minute, func() bool { return len(f.missing()) == 0 })
	f.close() // before the test stops what the clients connect through
	f.mu.Lock()
	defer f.mu.Unlock()
	r := flowResult{sent: f.sent, acked: len(f.acked), received: len(f.received), dups: f.dups, failed: f.failed}
	r.lost = len(f.missingLocked())
	r.ackGap, r.receiveGap = longestGap(f.acked, from), longestGap(f.received, from)
	return r
}

func (f *flow) missing() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.missingLocked()
}

func (f *flow) missingLocked() []int {
	var out []int
	for seq := range f.acked {
		if _, ok := f.received[seq]; !ok {
			out = append(out, seq)
		}
	}
	sort.Ints(out)
	return out
}

// longestGap is the longest time between from and the first event after it, or between two
// events after from.
func longestGap(events map[int]time.Time, from time.Time) time.Duration {
	var ts []time.Time
	for _, at := range events {
		if at.After(from) {
			ts = append(ts, at)
		}
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	var gap time.Duration
	prev := from
	for _, at := range ts {
		gap = max(gap, at.Sub(prev))
		prev = at
	}
	return gap
}

// checkNoLoss fails the test if an acknowledged message of f never arrived.
func checkNoLoss(t *testing.T, f *flow, r flowResult) {
	t.Helper()
	if r.acked == 0 {
		t.Errorf("%s: nothing was acknowledged", f.name)
	}
	if r.lost > 0 {
		m := f.missing()
		t.Errorf("%s: %d acknowledged messages never arrived (first: %v)", f.name, r.lost, m[:min(10, len(m))])
	}
}

// waitRunning lets the flows run steadily before a fault: each must have a message acknowledged
// and one received (60 s at most, a loaded machine starts clients slowly), then they run 5 s.
func waitRunning(t *testing.T, flows ...*flow) {
	t.Helper()
	if !waitRecovered(flows, time.Now(), 60*time.Second) {
		t.Fatal("the flows are not running before the fault: no message acknowledged and received within 60 s")
	}
	time.Sleep(5 * time.Second)
}

// waitRecovered waits until every flow has had a message acknowledged and one received after
// since, or limit passes; it reports whether they all did.
func waitRecovered(flows []*flow, since time.Time, limit time.Duration) bool {
	return wait.Within(limit, func() bool {
		all := true
		for _, f := range flows {
			all = all && f.ackedSince(since) && f.receivedSince(since)
		}
		return all
	})
}
