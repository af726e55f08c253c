// Command muxload is one of the client processes of the multiplexing scale test: it runs
// -count Pulsar clients (pulsar-client-go), each its own pulsar.Client and so its own
// connection to the proxy, each with one producer. The test splits its clients over several
// such processes so that no process passes the machine's file-descriptor limit.
//
// It talks to the test in JSON lines on stdout: {"event":"ready"} once every producer is
// created, then, after the line "send" on stdin, every producer sends -per messages
// "<producer>:<seq>" and it prints {"event":"sent"}. On end of stdin it closes its clients
// and exits. Any failure is printed as {"event":"error"} and exits 1.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
)

// report is one JSON line to the test.
type report struct {
	Event     string `json:"event"`
	Producers int    `json:"producers,omitempty"`
	Messages  int    `json:"messages,omitempty"`
	Millis    int64  `json:"ms,omitempty"`
	Error     string `json:"error,omitempty"`
}

var out = json.NewEncoder(os.Stdout)

func main() {
	url := flag.String("url", "", "the proxy's service URL")
	topics := flag.String("topics", "", "comma-separated topics; producer i uses topic i mod their number")
	first := flag.Int("first", 0, "number of the first producer (names are p%05d)")
	count := flag.Int("count", 1, "clients, each with one producer")
	per := flag.Int("per", 3, "messages each producer sends")
	rate := flag.Float64("rate", 0, "producers created per second (0: as fast as 16 at a time go)")
	flag.Parse()
	names := strings.Split(*topics, ",")
	if *url == "" || *topics == "" || *count < 1 {
		fail(fmt.Errorf("usage: muxload -url URL -topics T1,T2 [-first N] [-count N] [-per N] [-rate R]"))
	}
	began := time.Now()
	clients, producers, err := create(*url, names, *first, *count, *rate)
	if err != nil {
		fail(err)
	}
	out.Encode(report{Event: "ready", Producers: len(producers), Millis: time.Since(began).Milliseconds()})

	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if in.Text() != "send" {
			continue
		}
		began = time.Now()
		if err := sendAll(producers, *per); err != nil {
			fail(err)
		}
		out.Encode(report{Event: "sent", Messages: len(producers) * *per, Millis: time.Since(began).Milliseconds()})
	}
	for i := range producers {
		producers[i].Close()
		clients[i].Close()
	}
}

// create makes count clients with a producer each, at most 16 at a time and, with rate > 0,
// at most rate a second. A client closes its lookup connection to the proxy once it has been
// idle for its idle time (one minute, the least it allows; checked every minute), so a paced
// run holds fewer connections at once than two per client. The producers' partition
// discovery, a lookup every minute by default, would keep that connection in use: the
// topics are not partitioned, so it runs hourly here.
func create(url string, topics []string, first, count int, rate float64) ([]pulsar.Client, []pulsar.Producer, error) {
	clients := make([]pulsar.Client, count)
	producers := make([]pulsar.Producer, count)
	var tick <-chan time.Time
	if rate > 0 {
		t := time.NewTicker(time.Duration(float64(time.Second) / rate))
		defer t.Stop()
		tick = t.C
	}
	var wg sync.WaitGroup
	var once sync.Once
	var firstErr error
	sem := make(chan struct{}, 16)
	for i := range count {
		if tick != nil {
			<-tick
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			n := first + i
			c, err := pulsar.NewClient(pulsar.ClientOptions{URL: url, OperationTimeout: 2 * time.Minute,
				ConnectionTimeout: 30 * time.Second, ConnectionMaxIdleTime: time.Minute, Logger: plog.DefaultNopLogger()})
			if err == nil {
				clients[i] = c
				producers[i], err = c.CreateProducer(pulsar.ProducerOptions{Topic: topics[n%len(topics)],
					Name: fmt.Sprintf("p%05d", n), DisableBatching: true, SendTimeout: 2 * time.Minute,
					PartitionsAutoDiscoveryInterval: time.Hour})
			}
			if err != nil {
				once.Do(func() { firstErr = fmt.Errorf("producer p%05d: %w", n, err) })
			}
		}()
	}
	wg.Wait()
	return clients, producers, firstErr
}

// sendAll sends per messages from every producer at once, each producer's in sequence.
func sendAll(producers []pulsar.Producer, per int) error {
	var wg sync.WaitGroup
	errs := make(chan error, len(producers))
	for _, p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := range per {
				if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "%s:%d", p.Name(), seq)}); err != nil {
					errs <- fmt.Errorf("%s: send %d: %w", p.Name(), seq, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs // nil when closed empty
}

func fail(err error) {
	out.Encode(report{Event: "error", Error: err.Error()})
	os.Exit(1)
}
