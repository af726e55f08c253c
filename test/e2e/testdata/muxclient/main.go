// Command muxclient is a Pulsar client (pulsar-client-go) for the multiplexing end-to-end
// test to kill or stop: it creates a producer and a consumer on a topic through the proxy,
// prints "ready" once a message went round, then keeps producing and consuming until it is
// killed (so its consumer has permits out when it is stopped).
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
)

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: muxclient SERVICE_URL TOPIC SUBSCRIPTION")
		os.Exit(2)
	}
	url, topic, sub := os.Args[1], os.Args[2], os.Args[3]
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: url, OperationTimeout: 60 * time.Second, Logger: plog.DefaultNopLogger()})
	if err != nil {
		fail(err)
	}
	cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: sub, Type: pulsar.Shared})
	if err != nil {
		fail(err)
	}
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, Name: sub + "-producer"})
	if err != nil {
		fail(err)
	}
	ctx := context.Background()
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("first")}); err != nil {
		fail(err)
	}
	if _, err := cons.Receive(ctx); err != nil {
		fail(err)
	}
	fmt.Println("ready")
	go func() {
		for {
			msg, err := cons.Receive(ctx)
			if err != nil {
				fail(err)
			}
			cons.Ack(msg)
		}
	}()
	for i := 0; ; i++ {
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "m%d", i)}); err != nil {
			fail(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "muxclient:", err)
	os.Exit(1)
}
