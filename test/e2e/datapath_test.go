package e2e

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// The data path forwards frames without decoding them and moves large payloads socket to
// socket; these tests prove it changes no byte, for the largest message a broker accepts and
// for a long stream whose sizes cross every buffer and splice boundary of the proxy.

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// sizedPayload is message i's payload: its index, then bytes drawn from a generator seeded by
// the index, so the consumer can rebuild and compare it without keeping what was sent.
func sizedPayload(i, size int) []byte {
	p := make([]byte, max(size, 8))
	binary.BigEndian.PutUint64(p, uint64(i))
	r := rand.New(rand.NewPCG(uint64(i), 0x5eed))
	for k := 8; k < len(p); k++ {
		p[k] = byte(r.Uint32())
	}
	return p
}

// mixedSize spreads 10,000 messages over tiny, small, around-a-buffer and
// much-larger-than-a-buffer sizes (the proxy's read buffers are 4 and 64 KiB; larger frames
// are spliced).
func mixedSize(i int) int {
	r := rand.New(rand.NewPCG(uint64(i), 0x517e))
	switch {
	case i%200 == 0:
		return 64<<10 + r.IntN(192<<10) // 64-256 KiB
	case i%10 == 0:
		return 1 + r.IntN(64<<10) // up to 64 KiB
	default:
		return 1 + r.IntN(2<<10)
	}
}

// sendChecked produces the messages with a CRC32C property each and waits for every receipt.
func sendChecked(t *testing.T, p pulsar.Producer, payloads func(i int) []byte, n int) (bytes int) {
	t.Helper()
	errs := make(chan error, n)
	for i := range n {
		payload := payloads(i)
		bytes += len(payload)
		msg := &pulsar.ProducerMessage{Payload: payload, Properties: map[string]string{
			"crc32c": strconv.FormatUint(uint64(crc32.Checksum(payload, castagnoli)), 16),
		}}
		p.SendAsync(context.Background(), msg, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) { errs <- err })
	}
	if err := p.Flush(); err != nil {
		t.Fatalf("flush: %v", err)
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	return bytes
}

// receiveChecked receives n messages in order and checks each against its CRC32C property
// and against the payload rebuilt from its index.
func receiveChecked(t *testing.T, c pulsar.Consumer, payloads func(i int) []byte, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for i := range n {
		msg, err := c.Receive(ctx)
		if err != nil {
			t.Fatalf("receive %d of %d: %v", i, n, err)
		}
		p := msg.Payload()
		if got := strconv.FormatUint(uint64(crc32.Checksum(p, castagnoli)), 16); got != msg.Properties()["crc32c"] {
			t.Fatalf("message %d: CRC32C %s, producer's was %s", i, got, msg.Properties()["crc32c"])
		}
		if len(p) < 8 || binary.BigEndian.Uint64(p) != uint64(i) {
			t.Fatalf("message %d: out of order or truncated (%d bytes)", i, len(p))
		}
		if want := payloads(i); string(p) != string(want) {
			t.Fatalf("message %d: %d bytes differ from the %d sent", i, len(p), len(want))
		}
		c.Ack(msg)
	}
}

func TestDataPathLargestMessage(t *testing.T) {
	proxy := startProxy(t, brokerURLs(), "")
	c := newClient(t, proxy.PulsarURL)
	topic := uniqueTopic(t, "big")
	consumer := subscribe(t, c, topic, "s", pulsar.Exclusive)
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// The broker's maxMessageSize (5 MiB) bounds the message, metadata included.
	const size = 5<<20 - 1<<10
	payloads := func(i int) []byte { return sizedPayload(i, size) }
	sendChecked(t, p, payloads, 3)
	receiveChecked(t, consumer, payloads, 3)
	if out := proxy.metric(t, "pulsar_proxy_bytes_total", `direction="broker_to_client"`); out < 3*size {
		t.Errorf("broker_to_client bytes = %v, want at least %d", out, 3*size)
	}
}

func TestDataPathMixedSizeStream(t *testing.T) {
	proxy := startProxy(t, brokerURLs(), "")
	c := newClient(t, proxy.PulsarURL)
	topic := uniqueTopic(t, "mixed")
	consumer := subscribe(t, c, topic, "s", pulsar.Exclusive)
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const n = 10000
	payloads := func(i int) []byte { return sizedPayload(i, mixedSize(i)) }
	total := sendChecked(t, p, payloads, n)
	receiveChecked(t, consumer, payloads, n)
	t.Logf("%d messages, %d payload bytes", n, total)
	in := proxy.metric(t, "pulsar_proxy_bytes_total", `direction="client_to_broker"`)
	out := proxy.metric(t, "pulsar_proxy_bytes_total", `direction="broker_to_client"`)
	if in < float64(total) || out < float64(total) {
		t.Errorf("bytes forwarded: in=%v out=%v, want both at least the %d payload bytes", in, out, total)
	}
}
