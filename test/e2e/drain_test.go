package e2e

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/pulsar-proxy/pulsar-proxy/test/wait"
)

// serviceAddress plays a Kubernetes Service in front of proxies: each new connection goes
// to the first backend that accepts it, so once a draining proxy closes its listener, clients
// reconnect to the next one.
type serviceAddress struct {
	ln       net.Listener
	backends []string
	wg       sync.WaitGroup
}

func startServiceAddress(t *testing.T, backends ...string) *serviceAddress {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &serviceAddress{ln: ln, backends: backends}
	s.wg.Add(1)
	go s.serve()
	t.Cleanup(func() { ln.Close(); s.wg.Wait() })
	return s
}

func (s *serviceAddress) serve() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		var up net.Conn
		for _, b := range s.backends {
			if up, err = net.DialTimeout("tcp", b, time.Second); err == nil {
				break
			}
		}
		if up == nil {
			c.Close()
			continue
		}
		s.wg.Add(2)
		go func() { defer s.wg.Done(); io.Copy(up, c); up.Close() }()
		go func() { defer s.wg.Done(); io.Copy(c, up); c.Close() }()
	}
}

// TestDrainHandsClientsToAnotherProxy: two proxies behind one service address; a producer
// and a consumer run through the first. SIGTERM to it: it hands its sessions over (stops
// taking requests, delivers the brokers' answers, closes) and exits long before its drain
// deadline; the clients reconnect through the second proxy, and every message sent arrives.
// The test sends the first third, signals, waits until the first proxy is seen draining (its
// log line, and /readyz no longer 200), and only then sends the rest, so those sends are
// made while it drains or after it left, whatever the timing.
func TestDrainHandsClientsToAnotherProxy(t *testing.T) {
	first := startProxy(t, brokerURLs(), "session:\n  drainTimeout: 60s\n")
	second := startProxy(t, brokerURLs(), "")
	svc := startServiceAddress(t, first.Addr, second.Addr)
	client := newClient(t, "pulsar://"+svc.ln.Addr().String())
	topic := uniqueTopic(t, "drain")
	consumer := subscribe(t, client, topic, "s", pulsar.Exclusive)
	producer, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, SendTimeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()

	const total = 3000
	var failed atomic.Int64
	var sent sync.WaitGroup
	drained := make(chan time.Duration, 1)
	for i := range total {
		if i == total/3 {
			go func() {
				began := time.Now()
				if !first.Stop() {
					t.Error("the first proxy did not stop by itself")
				}
				drained <- time.Since(began)
			}()
			waitLogLine(t, first, `"message":"stopping: draining sessions"`)
			wait.Until(t, 10*time.Second, "the first proxy not ready (draining) or gone", func() bool {
				code, body := first.get("/readyz")
				if code != 0 && code != 200 && code != 503 {
					t.Fatalf("/readyz of the draining proxy: %d %s", code, body)
				}
				return code != 200
			})
		}
		sent.Add(1)
		producer.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: payloadFor(i)},
			func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				if err != nil {
					failed.Add(1)
				}
				sent.Done()
			})
		time.Sleep(time.Millisecond) // a steady stream, not one burst
	}
	sent.Wait()
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d sends failed", n)
	}
	took := <-drained
	if took > 30*time.Second {
		t.Fatalf("the drain took %v: it waited for its deadline instead of handing sessions over", took)
	}

	seen := map[int]int{}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for len(seen) < total {
		msg, err := consumer.Receive(ctx)
		if err != nil {
			t.Fatalf("received %d distinct of %d: %v", len(seen), total, err)
		}
		seen[indexOf(msg.Payload())]++
		consumer.Ack(msg)
	}
	duplicates := 0
	for _, n := range seen {
		duplicates += n - 1
	}
	t.Logf("first proxy drained and exited in %v; %d messages, all received, %d duplicates", took.Round(time.Millisecond), total, duplicates)
	if log := first.LogTail(100000); !strings.Contains(log, `"reason":"drained"`) || !strings.Contains(log, "every session handed over") {
		t.Fatalf("no session of the first proxy ended drained, or the drain did not finish:\n%s", first.LogTail(20))
	}
	if got := second.metric(t, "pulsar_proxy_broker_sessions_total"); got < 1 {
		t.Fatalf("the second proxy opened %v broker sessions: the clients did not move to it", got)
	}
}
