package pulsarclient

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/wait"
)

func subscribed(t *testing.T, f *fakeCluster, opts ConsumerOptions) *Consumer {
	t.Helper()
	c := newTestClient(t, f)
	opts.Topic, opts.Subscription, opts.Durable = "persistent://a/b/t", "s", true
	co, err := c.Subscribe(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(co.Close)
	wait.Until(t, 5*time.Second, "the initial permits", func() bool { return f.granted() > 0 })
	return co
}

func (f *fakeCluster) acks() []uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.acked)
}

// sendBatch pushes entry n, a batch of msgs; ackSet has a bit set for each slot still to deliver.
func (f *fakeCluster) sendBatch(t *testing.T, consumerID, n uint64, ackSet int64, msgs ...string) {
	md := &pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(n), PublishTime: proto.Uint64(1),
		NumMessagesInBatch: proto.Int32(int32(len(msgs)))}
	cmd := &pb.BaseCommand{Type: pb.BaseCommand_MESSAGE.Enum(), Message: &pb.CommandMessage{ConsumerId: proto.Uint64(consumerID),
		MessageId: &pb.MessageIdData{LedgerId: proto.Uint64(1), EntryId: proto.Uint64(n)}, AckSet: []int64{ackSet}}}
	b, err := frame.AppendPayloadCommand(nil, cmd, nil, md, batch(t, msgs...))
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.conn.Write(b)
}

// TestAcksOfIdsNeverDelivered: ids come from the client. Acks and negative acks of entries
// the consumer never delivered keep no state (a batch size claimed by a crafted id allocated
// its slots, a negative ack scheduled a redelivery, each growing without bound); an ack of a
// whole entry still reaches the broker, as Pulsar's clients send it.
func TestAcksOfIdsNeverDelivered(t *testing.T) {
	f := newFakeCluster(t)
	co := subscribed(t, f, ConsumerOptions{QueueSize: 10})
	for e := uint64(0); e < 1000; e++ {
		co.Ack(MessageID{Ledger: 7, Entry: e, Partition: -1, BatchIndex: 0, BatchSize: 1 << 16})
		co.Nack(MessageID{Ledger: 7, Entry: e, Partition: -1, BatchIndex: -1})
	}
	co.Ack(MessageID{Ledger: 7, Entry: 5000, Partition: -1, BatchIndex: -1})
	wait.Until(t, 5*time.Second, "the whole entry's ack at the broker", func() bool { return slices.Contains(f.acks(), 5000) })
	co.mu.Lock()
	defer co.mu.Unlock()
	tr := &co.tracker
	if n := len(tr.outstanding) + len(tr.batches) + len(tr.nacks) + len(tr.unacked); n != 0 {
		t.Fatalf("state kept for ids never delivered: %d outstanding, %d batches, %d negative acks, %d watched",
			len(tr.outstanding), len(tr.batches), len(tr.nacks), len(tr.unacked))
	}
	if got := f.acks(); len(got) != 1 {
		t.Fatalf("%d acks reached the broker, want only the whole entry's", len(got))
	}
}

// TestBatchAckCountsTheBrokersSlots: a batch's entry is acknowledged once the messages the
// broker delivered are (not the slots its ack_set said were done), and an ack claiming
// another batch size counts for nothing.
func TestBatchAckCountsTheBrokersSlots(t *testing.T) {
	f := newFakeCluster(t)
	co := subscribed(t, f, ConsumerOptions{QueueSize: 10})
	f.sendBatch(t, co.parts[0].id, 3, 0b101, "a", "b", "c") // slot 1 acknowledged before
	var ids []MessageID
	for range 2 {
		m, err := co.Receive(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, m.ID)
	}
	if ids[0].BatchIndex != 0 || ids[1].BatchIndex != 2 {
		t.Fatalf("delivered %+v, want slots 0 and 2", ids)
	}
	co.Ack(ids[0])
	forged := ids[1]
	forged.BatchSize = 2
	co.Ack(forged)
	time.Sleep(50 * time.Millisecond)
	if got := f.acks(); len(got) != 0 {
		t.Fatalf("entry acknowledged before its slot 2 was: %v", got)
	}
	co.Ack(ids[1])
	wait.Until(t, 5*time.Second, "the entry's ack", func() bool { return slices.Equal(f.acks(), []uint64{3}) })
}

// TestUnackedBound: at MaxUnacked entries delivered and not acknowledged, Receive waits,
// until an ack makes room.
func TestUnackedBound(t *testing.T) {
	f := newFakeCluster(t)
	co := subscribed(t, f, ConsumerOptions{QueueSize: 10, MaxUnacked: 3})
	for n := uint64(0); n < 5; n++ {
		f.sendMessage(co.parts[0].id, n, 10)
	}
	var first MessageID
	for i := range 3 {
		m, err := co.Receive(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = m.ID
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if m, err := co.Receive(ctx); err == nil {
		t.Fatalf("delivered %v beyond the bound of 3 unacknowledged", m.ID)
	}
	co.Ack(first)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	if _, err := co.Receive(ctx2); err != nil {
		t.Fatalf("after an ack: %v", err)
	}
}

// TestRedeliveryAtTheBound: at MaxUnacked, a message of an entry outstanding already (sent
// again after a negative ack) is still delivered: it adds nothing to hold, and the client
// waits for it.
func TestRedeliveryAtTheBound(t *testing.T) {
	f := newFakeCluster(t)
	co := subscribed(t, f, ConsumerOptions{QueueSize: 10, MaxUnacked: 2, Type: pb.CommandSubscribe_Shared})
	id := co.parts[0].id
	f.sendMessage(id, 0, 10)
	f.sendMessage(id, 1, 10)
	var first MessageID
	for i := range 2 {
		m, err := co.Receive(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = m.ID
		}
	}
	co.Nack(first)
	f.sendMessage(id, 0, 10) // the broker sends entry 0 again
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if m, err := co.Receive(ctx); err != nil || m.ID.Entry != 0 {
		t.Fatalf("entry 0 sent again at the bound: %v %v", m, err)
	}
}

// TestDeadLetterRefusedBacksOff: a dead-letter topic that refuses the producer is tried again
// with a growing backoff, not at every broker round trip (a lookup, a PRODUCER and a log
// line each time).
func TestDeadLetterRefusedBacksOff(t *testing.T) {
	f := newFakeCluster(t)
	f.mu.Lock()
	f.refuseProducers = true
	f.mu.Unlock()
	co := subscribed(t, f, ConsumerOptions{QueueSize: 10, Type: pb.CommandSubscribe_Shared, MaxRedeliverCount: 1,
		DeadLetterTopic: "persistent://a/b/dlq"})
	md := &pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(0), PublishTime: proto.Uint64(1)}
	cmd := &pb.BaseCommand{Type: pb.BaseCommand_MESSAGE.Enum(), Message: &pb.CommandMessage{ConsumerId: proto.Uint64(co.parts[0].id),
		MessageId: &pb.MessageIdData{LedgerId: proto.Uint64(1), EntryId: proto.Uint64(0)}, RedeliveryCount: proto.Uint32(5)}}
	b, err := frame.AppendPayloadCommand(nil, cmd, nil, md, []byte("poison"))
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.conn.Write(b)
	f.mu.Unlock()
	attempts := func() int { f.mu.Lock(); defer f.mu.Unlock(); return f.producers }
	wait.Until(t, 5*time.Second, "a first attempt at the dead-letter topic", func() bool { return attempts() > 0 })
	time.Sleep(time.Second)
	// 100 ms doubling: at most 4 more within a second, however fast the machine.
	if n := attempts(); n > 5 {
		t.Fatalf("%d attempts at a refusing dead-letter topic within a second", n)
	}
}

// TestDeadLetterFailureAfterAck: an entry the client acknowledged while its dead-letter
// attempt ran must not come back into the tracker (held payloads, retried for ever, past
// MaxUnacked since its slot was freed).
func TestDeadLetterFailureAfterAck(t *testing.T) {
	f := newFakeCluster(t)
	f.mu.Lock()
	f.refuseProducers = true
	f.mu.Unlock()
	co := subscribed(t, f, ConsumerOptions{QueueSize: 10, Type: pb.CommandSubscribe_Shared, MaxRedeliverCount: 1,
		DeadLetterTopic: "persistent://a/b/dlq"})
	f.sendMessage(co.parts[0].id, 0, 10)
	m, err := co.Receive(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	entry := m.ID.entry()
	co.Ack(m.ID) // the ack lands while deadLetter's attempt is under way
	co.deadLetter(entry, []*Message{m}, true)
	co.mu.Lock()
	_, dead := co.tracker.dead[entry]
	_, nack := co.tracker.nacks[entry]
	_, out := co.tracker.outstanding[entry]
	co.mu.Unlock()
	if (dead || nack) && !out {
		t.Fatalf("an acknowledged entry is back in the tracker: dead %v nack %v outstanding %v", dead, nack, out)
	}
}
