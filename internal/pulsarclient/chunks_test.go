package pulsarclient

import (
	"bytes"
	"context"
	"runtime"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/wait"
	"github.com/pulsar-proxy/pulsar-proxy/upstream"
)

// chunk is one chunk as a producer sends it: entry, the message's uuid, its place and count,
// the whole payload's size, this chunk's bytes.
type chunk struct {
	entry     uint64
	uuid      string
	id, n     int32
	total     int32
	data      []byte
	published time.Time // zero: now
	mutate    func(*pb.MessageMetadata)
	delivered uint32 // the broker's redelivery count
}

func (f *fakeCluster) sendChunk(t *testing.T, consumerID uint64, c chunk) {
	t.Helper()
	if c.published.IsZero() {
		c.published = time.Now()
	}
	md := &pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(c.entry), PublishTime: proto.Uint64(uint64(c.published.UnixMilli())),
		Uuid: proto.String(c.uuid), ChunkId: proto.Int32(c.id), NumChunksFromMsg: proto.Int32(c.n), TotalChunkMsgSize: proto.Int32(c.total),
		PartitionKey: proto.String("key-" + c.uuid), Properties: []*pb.KeyValue{{Key: proto.String("p"), Value: proto.String("v")}}}
	if c.mutate != nil {
		c.mutate(md)
	}
	cmd := &pb.BaseCommand{Type: pb.BaseCommand_MESSAGE.Enum(), Message: &pb.CommandMessage{ConsumerId: proto.Uint64(consumerID),
		MessageId: &pb.MessageIdData{LedgerId: proto.Uint64(1), EntryId: proto.Uint64(c.entry)}, RedeliveryCount: proto.Uint32(c.delivered)}}
	b, err := frame.AppendPayloadCommand(nil, cmd, nil, md, c.data)
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.conn.Write(b)
}

// chunksOf splits payload into n chunks of a message, on entries from first on.
func chunksOf(uuid string, first uint64, payload []byte, n int) []chunk {
	var out []chunk
	size := (len(payload) + n - 1) / n
	for i := 0; i < n; i++ {
		part := payload[min(i*size, len(payload)):min((i+1)*size, len(payload))]
		out = append(out, chunk{entry: first + uint64(i), uuid: uuid, id: int32(i), n: int32(n), total: int32(len(payload)), data: part})
	}
	return out
}

func (f *fakeCluster) entries(of *[]uint64) []uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(*of)
}

func receiveWithin(t *testing.T, co *Consumer, d time.Duration) (*Message, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return co.Receive(ctx)
}

func (co *Consumer) assembling() int {
	co.mu.Lock()
	defer co.mu.Unlock()
	return len(co.chunks.order)
}

// TestChunkedMessageAssembled: a message's chunks, interleaved with another's, come out as
// one message: its payload decompressed whole, its key and properties, an id with its last
// and first chunk; what is being assembled is counted in the queue's bytes. Acknowledging
// it acknowledges every chunk; a negative ack has every chunk sent again.
func TestChunkedMessageAssembled(t *testing.T) {
	f := newFakeCluster(t)
	co := subscribed(t, f, ConsumerOptions{QueueSize: 10, Type: pb.CommandSubscribe_Shared, NackDelay: 10 * time.Millisecond})
	id := co.parts[0].id
	whole := bytes.Repeat([]byte("the whole message "), 1000)
	z := newCodecs()
	compressed, _ := z.compress(pb.CompressionType_LZ4, whole)
	lz := func(md *pb.MessageMetadata) {
		md.Compression, md.UncompressedSize = pb.CompressionType_LZ4.Enum(), proto.Uint32(uint32(len(whole)))
	}
	a := chunksOf("a", 10, compressed, 3)
	b := chunksOf("b", 20, []byte("second message"), 2)
	for _, c := range []chunk{a[0], b[0], a[1], b[1]} {
		c.mutate = lz
		if c.uuid == "b" {
			c.mutate = nil
		}
		f.sendChunk(t, id, c)
	}
	wait.Until(t, 5*time.Second, "the chunks counted", func() bool { return co.QueuedBytes() > len(compressed)/3 })
	m, err := receiveWithin(t, co, 5*time.Second)
	if err != nil || string(m.Payload) != "second message" {
		t.Fatalf("first message out: %v %v", m, err)
	}
	a[2].mutate = lz
	f.sendChunk(t, id, a[2])
	m, err = receiveWithin(t, co, 5*time.Second)
	if err != nil || !bytes.Equal(m.Payload, whole) || m.Key != "key-a" || m.Properties["p"] != "v" {
		t.Fatalf("assembled message: %v %v", m, err)
	}
	if want := (MessageID{Ledger: 1, Entry: 12, Partition: -1, BatchIndex: -1, Chunked: true, FirstLedger: 1, FirstEntry: 10}); m.ID != want {
		t.Fatalf("id %+v, want %+v", m.ID, want)
	}
	if co.assembling() != 0 || co.QueuedBytes() != 0 {
		t.Fatalf("after delivery: %d assembling, %d bytes held", co.assembling(), co.QueuedBytes())
	}
	co.Nack(m.ID)
	wait.Until(t, 5*time.Second, "every chunk sent again", func() bool { return slices.Equal(f.entries(&f.resent), []uint64{10, 11, 12}) })
	co.Ack(m.ID)
	wait.Until(t, 5*time.Second, "every chunk acknowledged", func() bool { return slices.Equal(f.acks(), []uint64{10, 11, 12}) })
}

// TestChunkedPendingBound: at most MaxPendingChunked messages are assembled at once; one
// more drops the oldest (not acknowledged: as the Java consumer, left to the ack timeout),
// whose later chunks then deliver nothing.
func TestChunkedPendingBound(t *testing.T) {
	f := newFakeCluster(t)
	co := subscribed(t, f, ConsumerOptions{QueueSize: 100})
	id := co.parts[0].id
	var msgs [][]chunk
	for i := 0; i <= MaxPendingChunked; i++ {
		msgs = append(msgs, chunksOf(string(rune('a'+i)), uint64(100*i), []byte("0123456789"), 2))
		f.sendChunk(t, id, msgs[i][0])
	}
	wait.Until(t, 5*time.Second, "the first chunks taken", func() bool {
		co.mu.Lock()
		defer co.mu.Unlock()
		_, newest := co.chunks.pending[chunkKey{partition: -1, uuid: string(rune('a' + MaxPendingChunked))}]
		return newest
	})
	if n := co.assembling(); n != MaxPendingChunked {
		t.Fatalf("%d messages assembled at once, want %d", n, MaxPendingChunked)
	}
	f.sendChunk(t, id, msgs[0][1]) // the oldest's: dropped
	f.sendChunk(t, id, msgs[MaxPendingChunked][1])
	m, err := receiveWithin(t, co, 5*time.Second)
	if err != nil || m.ID.Entry != uint64(100*MaxPendingChunked+1) {
		t.Fatalf("got %v %v, want the newest message", m, err)
	}
	if got := f.acks(); len(got) != 0 {
		t.Fatalf("the dropped message's chunks acknowledged: %v", got)
	}
}

// TestChunkedExpiry: a message not assembled within ChunkExpiry is dropped, its chunks
// acknowledged and its bytes no longer counted.
func TestChunkedExpiry(t *testing.T) {
	f := newFakeCluster(t)
	co := subscribed(t, f, ConsumerOptions{QueueSize: 10, ChunkExpiry: 200 * time.Millisecond})
	c := chunksOf("x", 5, []byte("0123456789"), 3)
	f.sendChunk(t, co.parts[0].id, c[0])
	f.sendChunk(t, co.parts[0].id, c[1])
	wait.Until(t, 5*time.Second, "the incomplete message's chunks acknowledged", func() bool { return slices.Equal(f.acks(), []uint64{5, 6}) })
	if co.assembling() != 0 || co.QueuedBytes() != 0 {
		t.Fatalf("after expiry: %d assembling, %d bytes held", co.assembling(), co.QueuedBytes())
	}
}

// TestChunkedBadMetadata: a chunk's sizes and ids are its producer's word. A message over the
// consumer's bound, fewer bytes than chunks, a chunk id outside the count, or chunks that
// exceed their total are acknowledged as corrupt and nothing is held for them; a chunk out of
// order ends its message; a chunk stored twice is acknowledged and its message still whole.
func TestChunkedBadMetadata(t *testing.T) {
	f := newFakeCluster(t)
	co := subscribed(t, f, ConsumerOptions{QueueSize: 100, MaxQueuedBytes: 1 << 20})
	id := co.parts[0].id
	f.sendChunk(t, id, chunk{entry: 1, uuid: "huge", id: 0, n: 2, total: 1 << 30, data: []byte("x")})
	f.sendChunk(t, id, chunk{entry: 2, uuid: "many", id: 0, n: 1 << 30, total: 10, data: []byte("x")})
	f.sendChunk(t, id, chunk{entry: 3, uuid: "past", id: 5, n: 2, total: 10, data: []byte("x")})
	over := chunksOf("over", 4, []byte("0123456789"), 3) // chunk 1 past the total: dropped before chunk 2
	over[1].data = []byte("0123456789")
	f.sendChunk(t, id, over[0])
	f.sendChunk(t, id, over[1])
	wait.Until(t, 5*time.Second, "the bad chunks acknowledged as corrupt", func() bool {
		return slices.Equal(f.entries(&f.corrupt), []uint64{1, 2, 3, 4, 5})
	})
	if co.assembling() != 0 || co.QueuedBytes() != 0 {
		t.Fatalf("held for bad chunks: %d assembling, %d bytes", co.assembling(), co.QueuedBytes())
	}
	gap := chunksOf("gap", 10, []byte("0123456789"), 3)
	f.sendChunk(t, id, gap[0])
	f.sendChunk(t, id, gap[2])
	twice := chunksOf("twice", 20, []byte("0123456789"), 3)
	dup := twice[1]
	dup.entry = 30 // the producer stored chunk 1 again
	for _, c := range []chunk{twice[0], twice[1], dup, twice[2]} {
		f.sendChunk(t, id, c)
	}
	m, err := receiveWithin(t, co, 5*time.Second)
	if err != nil || string(m.Payload) != "0123456789" || m.ID.FirstEntry != 20 || m.ID.Entry != 22 {
		t.Fatalf("got %v %v, want the message stored with a chunk twice", m, err)
	}
	wait.Until(t, 5*time.Second, "the second copy acknowledged", func() bool { return slices.Contains(f.acks(), 30) })
	if _, err := receiveWithin(t, co, 200*time.Millisecond); err == nil {
		t.Fatal("the message with a missing chunk delivered")
	}
	// As the Java consumer: a chunk out of order ends its message, neither acknowledged.
	if got := f.acks(); slices.Contains(got, 10) || slices.Contains(got, 12) {
		t.Fatalf("chunks of the message with a gap acknowledged: %v", got)
	}
	if co.assembling() != 0 {
		t.Fatalf("%d messages still assembled", co.assembling())
	}
}

// TestChunkedBytesBound: what all messages being assembled hold stays within the consumer's
// byte bound: a chunk that would take it over drops the oldest message.
func TestChunkedBytesBound(t *testing.T) {
	f := newFakeCluster(t)
	const limit = 64 << 10
	co := subscribed(t, f, ConsumerOptions{QueueSize: 100, MaxQueuedBytes: limit})
	id := co.parts[0].id
	big := bytes.Repeat([]byte("b"), 60<<10)
	a := chunksOf("a", 10, big, 2)
	b := chunksOf("b", 20, big, 2)
	for _, c := range []chunk{a[0], b[0], b[1], a[1]} {
		f.sendChunk(t, id, c)
	}
	m, err := receiveWithin(t, co, 5*time.Second)
	if err != nil || m.ID.Entry != 21 {
		t.Fatalf("got %v %v, want the newer message (the older dropped to make room)", m, err)
	}
	if _, err := receiveWithin(t, co, 200*time.Millisecond); err == nil {
		t.Fatal("the dropped message delivered")
	}
	if co.assembling() != 0 || co.QueuedBytes() != 0 {
		t.Fatalf("%d assembling, %d bytes still held", co.assembling(), co.QueuedBytes())
	}
}

// TestChunkedAssemblyWithinItsBound: one message's assembly, its chunks' ids counted, stays
// under the consumer's byte bound however many chunks it claims: a message of more chunks
// than the bound can hold is refused at its first chunk (a message of 5,000 empty chunks grew
// one assembly past the bound, and the ACK of all its chunks towards a broker's frame limit).
func TestChunkedAssemblyWithinItsBound(t *testing.T) {
	f := newFakeCluster(t)
	const limit = 64 << 10
	co := subscribed(t, f, ConsumerOptions{QueueSize: 1000, MaxQueuedBytes: limit})
	for i := range 3000 {
		f.sendChunk(t, co.parts[0].id, chunk{entry: uint64(i), uuid: "u", id: int32(i), n: 5000, total: 5000})
	}
	wait.Until(t, 10*time.Second, "every chunk answered", func() bool { return len(f.acks()) == 3000 })
	if b := co.QueuedBytes(); b > limit {
		t.Fatalf("one assembly holds %d bytes, over MaxQueuedBytes %d", b, limit)
	}
}

// TestChunkMetadataNotHeld: an assembly keeps its chunks' bytes, not the entries they came
// in, whose metadata (properties of a megabyte) is not counted.
func TestChunkMetadataNotHeld(t *testing.T) {
	f := newFakeCluster(t)
	co := subscribed(t, f, ConsumerOptions{QueueSize: 1000, MaxQueuedBytes: 64 << 10})
	big := string(bytes.Repeat([]byte("p"), 1<<20))
	heap := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heap()
	const k = 40
	for i := range k {
		f.sendChunk(t, co.parts[0].id, chunk{entry: uint64(i), uuid: "m", id: int32(i), n: 1000, total: 1000, data: []byte("x"),
			mutate: func(md *pb.MessageMetadata) {
				md.Properties = []*pb.KeyValue{{Key: proto.String("k"), Value: proto.String(big)}}
			}})
	}
	wait.Until(t, 10*time.Second, "the chunks taken", func() bool { return co.assembling() > 0 && co.chunkCount("m") == k })
	if grown := int64(heap()) - int64(before); grown > 8<<20 {
		t.Fatalf("the heap grew %d MiB for chunks counted as %d bytes", grown>>20, co.QueuedBytes())
	}
}

func (co *Consumer) chunkCount(uuid string) int {
	co.mu.Lock()
	defer co.mu.Unlock()
	if a := co.chunks.pending[chunkKey{partition: -1, uuid: uuid}]; a != nil {
		return len(a.ids)
	}
	return 0
}

// TestChunkedTooBigToDeadLetterIsDelivered: a chunked message over the brokers' message size,
// redelivered past MaxRedeliverCount, cannot be sent to the dead-letter topic (the proxy's
// producer does not cut messages in chunks): it is delivered again, not held and retried.
func TestChunkedTooBigToDeadLetterIsDelivered(t *testing.T) {
	f := newFakeCluster(t)
	factory := NewFactory(Config{Connector: &upstream.Connector{Dialer: &upstream.Dialer{Timeout: 5 * time.Second}, Timeout: 5 * time.Second},
		Resolver: fakeResolver{f.b.Addr}, Targets: allowAll{}, OperationTimeout: 5 * time.Second, MaxMessageSize: 5 << 20})
	c := factory.New(upstream.Client{Principal: "alice"}, nil)
	t.Cleanup(c.Close)
	co, err := c.Subscribe(context.Background(), ConsumerOptions{Topic: "persistent://a/b/t", Subscription: "s", Durable: true, QueueSize: 10,
		Type: pb.CommandSubscribe_Shared, MaxQueuedBytes: 16 << 20, MaxRedeliverCount: 1, DeadLetterTopic: "persistent://a/b/t-DLQ"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(co.Close)
	wait.Until(t, 5*time.Second, "the initial permits", func() bool { return f.granted() > 0 })
	for _, ch := range chunksOf("big", 40, bytes.Repeat([]byte("z"), 6<<20), 2) {
		ch.delivered = 2
		f.sendChunk(t, co.parts[0].id, ch)
	}
	m, err := receiveWithin(t, co, 10*time.Second)
	if err != nil || len(m.Payload) != 6<<20 {
		t.Fatalf("the chunked message redelivered past the count: %v", err)
	}
	co.mu.Lock()
	defer co.mu.Unlock()
	if n := len(co.tracker.dead); n != 0 {
		t.Fatalf("%d entries held for the dead-letter topic", n)
	}
}
