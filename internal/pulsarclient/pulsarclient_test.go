package pulsarclient

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/brokers"
	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/fakebroker"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/wait"
	"github.com/pulsar-proxy/pulsar-proxy/upstream"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestHashes: keys go to the partitions a Java client sends them to.
func TestHashes(t *testing.T) {
	for s, want := range map[string]uint32{"hello": 99162322, "key-1": 101943363, "": 0, "\U0001F600": 1772899} {
		if got := javaStringHash(s); got != want&0x7fffffff {
			t.Errorf("javaStringHash(%q) = %d, want %d", s, got, want&0x7fffffff)
		}
	}
	if got := murmur3Hash("hello"); got != 613153351 {
		t.Errorf("murmur3Hash(hello) = %d, want 613153351", got)
	}
}

func TestCodecsRoundTrip(t *testing.T) {
	z := newCodecs()
	payloads := [][]byte{nil, []byte("x"), bytes.Repeat([]byte("abc"), 10000), []byte("incompressible \x00\x01\xff\xfe random-ish")}
	for _, c := range []pb.CompressionType{pb.CompressionType_NONE, pb.CompressionType_LZ4, pb.CompressionType_ZLIB, pb.CompressionType_ZSTD, pb.CompressionType_SNAPPY} {
		for _, p := range payloads {
			enc, err := z.compress(c, p)
			if err != nil {
				t.Fatalf("%v: %v", c, err)
			}
			dec, err := z.decompress(c, enc, uint32(len(p)), 1<<20)
			if err != nil || !bytes.Equal(dec, p) {
				t.Fatalf("%v of %d bytes came back as %d bytes (%v)", c, len(p), len(dec), err)
			}
		}
	}
	if _, err := z.decompress(pb.CompressionType_ZLIB, []byte("x"), 10<<20, 1<<20); err == nil {
		t.Fatal("an uncompressed size over the limit accepted")
	}
}

// entryPayload is a MESSAGE's payload section: metadata and data.
func entryPayload(t *testing.T, md *pb.MessageMetadata, data []byte) []byte {
	t.Helper()
	cmd := &pb.BaseCommand{Type: pb.BaseCommand_MESSAGE.Enum(), Message: &pb.CommandMessage{ConsumerId: proto.Uint64(1),
		MessageId: &pb.MessageIdData{LedgerId: proto.Uint64(1), EntryId: proto.Uint64(2)}}}
	b, err := frame.AppendPayloadCommand(nil, cmd, nil, md, data)
	if err != nil {
		t.Fatal(err)
	}
	f, err := frame.NewReader(bytes.NewReader(b), 0).ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte(nil), f.Payload...)
}

func batch(t *testing.T, msgs ...string) []byte {
	var out []byte
	for i, m := range msgs {
		smd, _ := proto.Marshal(&pb.SingleMessageMetadata{PayloadSize: proto.Int32(int32(len(m))), PartitionKey: proto.String(m),
			CompactedOut: proto.Bool(i == 1 && len(msgs) > 3)})
		out = binary.BigEndian.AppendUint32(out, uint32(len(smd)))
		out = append(append(out, smd...), m...)
	}
	return out
}

// TestDecodeEntry: a batch comes apart into its messages with their batch ids, compacted-out
// slots and slots the broker's ack_set says are acknowledged left out.
func TestDecodeEntry(t *testing.T) {
	z := newCodecs()
	data := batch(t, "a", "b", "c", "d")
	lz, _ := z.compress(pb.CompressionType_LZ4, data)
	md := &pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(0), PublishTime: proto.Uint64(5),
		NumMessagesInBatch: proto.Int32(4), Compression: pb.CompressionType_LZ4.Enum(), UncompressedSize: proto.Uint32(uint32(len(data)))}
	cmd := &pb.CommandMessage{MessageId: &pb.MessageIdData{LedgerId: proto.Uint64(1), EntryId: proto.Uint64(2)}, AckSet: []int64{0b1011}}
	msgs, err := z.decodeEntry(cmd, entryPayload(t, md, lz), 3, 1<<20, false)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range msgs {
		got = append(got, m.Key)
		if m.ID.Partition != 3 || m.ID.BatchSize != 4 || m.PublishTime != 5 || string(m.Payload) != m.Key {
			t.Errorf("message %+v", m)
		}
	}
	// slot 1 compacted out, slot 2 acknowledged (its ack_set bit clear)
	if len(got) != 2 || got[0] != "a" || got[1] != "d" {
		t.Fatalf("got %v, want [a d]", got)
	}
	enc := &pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(0), PublishTime: proto.Uint64(5),
		EncryptionKeys: []*pb.EncryptionKeys{{Key: proto.String("k"), Value: []byte("v")}}}
	if _, err := z.decodeEntry(cmd, entryPayload(t, enc, []byte("secret")), -1, 1<<20, false); err != errUndecryptable {
		t.Fatalf("encrypted entry: %v", err)
	}
	if msgs, err := z.decodeEntry(cmd, entryPayload(t, enc, []byte("secret")), -1, 1<<20, true); err != nil || string(msgs[0].Payload) != "secret" || msgs[0].Encryption == nil {
		t.Fatalf("encrypted entry, consumed as it is: %v %v", msgs, err)
	}
}

// fakeCluster is a stand-in broker that answers lookups, CONNECT, PRODUCER, SUBSCRIBE and
// SEND, and records FLOW permits; sendMessage pushes MESSAGEs to the consumer.
type fakeCluster struct {
	t       *testing.T
	b       *fakebroker.Broker
	mu      sync.Mutex
	permits uint32
	conn    net.Conn
	sends   int
	acked   []uint64 // entries of the ACKs received
	corrupt []uint64 // those of them acknowledged with a validation error
	resent  []uint64 // entries asked for again (REDELIVER_UNACKNOWLEDGED_MESSAGES)

	producers       int  // PRODUCER commands received
	refuseProducers bool // answer them AuthorizationError
}

func newFakeCluster(t *testing.T) *fakeCluster {
	f := &fakeCluster{t: t}
	f.b = fakebroker.Start(t, f.handle)
	return f
}

func (f *fakeCluster) handle(c net.Conn, cmd *pb.BaseCommand) {
	var resp *pb.BaseCommand
	switch cmd.GetType() {
	case pb.BaseCommand_CONNECT:
		resp = frame.Connected("fake", 21, 5<<20)
	case pb.BaseCommand_PRODUCER:
		f.mu.Lock()
		f.producers++
		refuse := f.refuseProducers
		f.mu.Unlock()
		if refuse {
			resp = frame.Error(cmd.Producer.GetRequestId(), pb.ServerError_AuthorizationError, "not on this topic")
			break
		}
		resp = &pb.BaseCommand{Type: pb.BaseCommand_PRODUCER_SUCCESS.Enum(), ProducerSuccess: &pb.CommandProducerSuccess{
			RequestId: cmd.Producer.RequestId, ProducerName: proto.String("fake-1"), LastSequenceId: proto.Int64(-1)}}
	case pb.BaseCommand_SUBSCRIBE:
		f.mu.Lock()
		f.conn = c
		f.mu.Unlock()
		resp = &pb.BaseCommand{Type: pb.BaseCommand_SUCCESS.Enum(), Success: &pb.CommandSuccess{RequestId: cmd.Subscribe.RequestId}}
	case pb.BaseCommand_FLOW:
		f.mu.Lock()
		f.permits += cmd.Flow.GetMessagePermits()
		f.mu.Unlock()
	case pb.BaseCommand_ACK:
		f.mu.Lock()
		for _, id := range cmd.Ack.MessageId {
			f.acked = append(f.acked, id.GetEntryId())
			if cmd.Ack.ValidationError != nil {
				f.corrupt = append(f.corrupt, id.GetEntryId())
			}
		}
		f.mu.Unlock()
	case pb.BaseCommand_REDELIVER_UNACKNOWLEDGED_MESSAGES:
		f.mu.Lock()
		for _, id := range cmd.RedeliverUnacknowledgedMessages.MessageIds {
			f.resent = append(f.resent, id.GetEntryId())
		}
		f.mu.Unlock()
	case pb.BaseCommand_SEND:
		f.mu.Lock()
		f.sends++
		f.mu.Unlock()
		resp = &pb.BaseCommand{Type: pb.BaseCommand_SEND_RECEIPT.Enum(), SendReceipt: &pb.CommandSendReceipt{
			ProducerId: cmd.Send.ProducerId, SequenceId: cmd.Send.SequenceId,
			MessageId: &pb.MessageIdData{LedgerId: proto.Uint64(9), EntryId: cmd.Send.SequenceId}}}
	}
	if resp != nil {
		frame.WriteCommand(c, resp)
	}
}

// sendMessage pushes entry n (payload of size bytes) to consumer 0's connection.
func (f *fakeCluster) sendMessage(consumerID uint64, n uint64, size int) {
	f.mu.Lock()
	c := f.conn
	f.mu.Unlock()
	md := &pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(n), PublishTime: proto.Uint64(1)}
	cmd := &pb.BaseCommand{Type: pb.BaseCommand_MESSAGE.Enum(), Message: &pb.CommandMessage{ConsumerId: proto.Uint64(consumerID),
		MessageId: &pb.MessageIdData{LedgerId: proto.Uint64(1), EntryId: proto.Uint64(n)}}}
	b, _ := frame.AppendPayloadCommand(nil, cmd, nil, md, make([]byte, size))
	c.Write(b)
}

func (f *fakeCluster) granted() uint32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.permits
}

type fakeResolver struct{ addr string }

func (r fakeResolver) Resolve(_ context.Context, _ upstream.Client, cmd *pb.BaseCommand) (*pb.BaseCommand, error) {
	if cmd.GetType() == pb.BaseCommand_PARTITIONED_METADATA {
		return &pb.BaseCommand{Type: pb.BaseCommand_PARTITIONED_METADATA_RESPONSE.Enum(), PartitionMetadataResponse: &pb.CommandPartitionedTopicMetadataResponse{
			RequestId: proto.Uint64(0), Partitions: proto.Uint32(0)}}, nil
	}
	return &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP_RESPONSE.Enum(), LookupTopicResponse: &pb.CommandLookupTopicResponse{
		RequestId: proto.Uint64(0), Response: pb.CommandLookupTopicResponse_Connect.Enum(), BrokerServiceUrl: proto.String("pulsar://" + r.addr)}}, nil
}

type allowAll struct{}

func (allowAll) Allow(target string) (brokers.Broker, error) {
	return brokers.ParseURL("pulsar://" + target)
}

func newTestClient(t *testing.T, f *fakeCluster) *Client {
	factory := NewFactory(Config{Connector: &upstream.Connector{Dialer: &upstream.Dialer{Timeout: 5 * time.Second}, Timeout: 5 * time.Second},
		Resolver: fakeResolver{f.b.Addr}, Targets: allowAll{}, OperationTimeout: 5 * time.Second})
	c := factory.New(upstream.Client{Principal: "alice"}, nil)
	t.Cleanup(c.Close)
	return c
}

// TestConsumerPermits: a consumer grants its queue's permits, no more until its client took
// half of them, and none while what it holds is over its byte bound.
func TestConsumerPermits(t *testing.T) {
	f := newFakeCluster(t)
	c := newTestClient(t, f)
	co, err := c.Subscribe(context.Background(), ConsumerOptions{Topic: "persistent://a/b/t", Subscription: "s", Durable: true,
		QueueSize: 10, MaxQueuedBytes: 25 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	id := co.parts[0].id
	wait.Until(t, 5*time.Second, "the initial permits", func() bool { return f.granted() == 10 })
	for n := uint64(0); n < 10; n++ {
		f.sendMessage(id, n, 10<<10) // 100 KiB: four times the byte bound
	}
	wait.Until(t, 5*time.Second, "the messages queued", func() bool { return co.QueuedBytes() == 10*(10<<10+messageOverhead) })
	ctx := context.Background()
	for i := 0; i < 7; i++ { // 30 KiB left: still over the bound
		if _, err := co.Receive(ctx); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond)
	if got := f.granted(); got != 10 {
		t.Fatalf("permits granted while the queue held %d bytes (over its bound): %d", co.QueuedBytes(), got)
	}
	co.Receive(ctx) // 20 KiB: under the bound, and 8 of 10 taken
	wait.Until(t, 5*time.Second, "the permits of the messages taken", func() bool { return f.granted() == 18 })
}

// TestProducerResendsAfterReconnect: messages sent while the broker connection is down are
// stored once it is back, in order, each answered with its id.
func TestProducerResendsAfterReconnect(t *testing.T) {
	f := newFakeCluster(t)
	c := newTestClient(t, f)
	p, err := c.CreateProducer(context.Background(), ProducerOptions{Topic: "persistent://a/b/t", InitialSequenceID: -1, SendTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	f.b.DropConnections()
	var mu sync.Mutex
	var ids []uint64
	done := make(chan struct{})
	for i := 0; i < 5; i++ {
		p.Send(&OutMessage{Payload: []byte("m")}, func(id MessageID, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("send: %v", err)
			}
			ids = append(ids, id.Entry)
			if len(ids) == 5 {
				close(done)
			}
		})
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the messages were not stored after the reconnect")
	}
	for i, e := range ids {
		if e != uint64(i) {
			t.Fatalf("stored as %v, want 0..4 in order", ids)
		}
	}
}
