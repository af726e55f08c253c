package pulsarclient

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// ConsumerOptions configure a consumer (or, with Start set, a reader).
type ConsumerOptions struct {
	Topic           string
	Subscription    string // "" for a reader: a name of its own is made
	Type            pb.CommandSubscribe_SubType
	Durable         bool
	InitialPosition pb.CommandSubscribe_InitialPosition
	Name            string
	Priority        int32
	// QueueSize is how many messages the consumer has the brokers send ahead of Receive, all
	// partitions together (each partition gets its share, at least one).
	QueueSize int
	// MaxQueuedBytes: no more permits while more than this is queued (0: no byte bound).
	MaxQueuedBytes int
	AckTimeout     time.Duration // 0: none
	NackDelay      time.Duration
	// MaxRedeliverCount > 0 sends messages redelivered that often to DeadLetterTopic.
	MaxRedeliverCount int
	DeadLetterTopic   string
	// What to do with encrypted messages (the proxy cannot decrypt): deliver them as they are
	// (CryptoConsume), acknowledge and drop them (CryptoDiscard), or neither.
	CryptoConsume, CryptoDiscard bool
	// MaxUnacked bounds the entries delivered and not yet acknowledged: at the bound Receive
	// waits for acknowledgements, as a broker stops dispatching (0: DefaultMaxUnacked).
	MaxUnacked int
	// ChunkExpiry is how long a chunked message may take to be assembled (0:
	// DefaultChunkExpiry).
	ChunkExpiry time.Duration
	// Start makes a reader: a non-durable exclusive subscription from the earliest message,
	// the latest, or just after an id.
	Start *Start
}

// Start is where a reader starts.
type Start struct {
	Earliest bool
	ID       *MessageID // nil: the latest (unless Earliest)
}

// Consumer receives from a topic, from every partition of a partitioned one.
type Consumer struct {
	c    *Client
	opts ConsumerOptions

	mu      sync.Mutex // guards what follows and every part's state
	parts   []*partConsumer
	queue   []*Message
	bytes   int
	notify  chan struct{}
	closed  bool
	tracker tracker
	dlq     deadLetters
	chunks  assembler
}

// partConsumer is the consumer of one partition; its state is guarded by Consumer.mu.
type partConsumer struct {
	co         *Consumer
	topic      string
	partition  int32
	id         uint64
	cn         *conn
	permits    int // its share of the queue
	consumed   int // messages received since the last FLOW
	start      *MessageID
	earliest   bool
	reachedEnd bool
	bo         backoff
	failed     error
}

// Subscribe makes a consumer of opts.Topic: one per partition, each on its broker.
func (c *Client) Subscribe(ctx context.Context, opts ConsumerOptions) (*Consumer, error) {
	if opts.QueueSize < 1 {
		opts.QueueSize = 1
	}
	if opts.Start != nil {
		opts.Subscription, opts.Type, opts.Durable = readerSubscription(), pb.CommandSubscribe_Exclusive, false
	}
	n, err := c.Partitions(ctx, opts.Topic)
	if err != nil {
		return nil, err
	}
	co := &Consumer{c: c, opts: opts, notify: make(chan struct{}, 1)}
	co.tracker.init(co)
	share := max(1, int(math.Ceil(float64(opts.QueueSize)/float64(max(n, 1)))))
	for i, t := range partitionTopics(opts.Topic, n) {
		pc := &partConsumer{co: co, topic: t, partition: -1, id: c.nextID(), permits: share}
		if n > 0 {
			pc.partition = int32(i)
		}
		if s := opts.Start; s != nil {
			pc.earliest, pc.start = s.Earliest, s.ID
		}
		co.parts = append(co.parts, pc)
	}
	if err := startAll(ctx, len(co.parts), func(ctx context.Context, i int) error { return co.parts[i].begin(ctx) }); err != nil {
		co.Close()
		return nil, err
	}
	return co, nil
}

// readerSubscription names a reader's subscription as Pulsar's readers do.
func readerSubscription() string {
	b := make([]byte, 5)
	rand.Read(b)
	return "reader-" + hex.EncodeToString(b)
}

// Subscription is the subscription's name (a reader's made-up one).
func (co *Consumer) Subscription() string { return co.opts.Subscription }

func (pc *partConsumer) begin(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, pc.co.c.cfg.OperationTimeout)
	defer cancel()
	for {
		err := pc.connect(ctx)
		if err == nil || !retryableFirst(err) {
			return err
		}
		select {
		case <-time.After(pc.bo.delay()):
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		}
	}
}

// connect subscribes the partition at its broker and grants its permits.
func (pc *partConsumer) connect(ctx context.Context) error {
	co := pc.co
	addr, err := co.c.lookup(ctx, pc.topic)
	if err != nil {
		return err
	}
	cn, err := co.c.conn(ctx, addr)
	if err != nil {
		return err
	}
	if !cn.addConsumer(pc.id, pc) {
		return cn.closeErr()
	}
	co.mu.Lock()
	cmd := pc.subscribeLocked()
	co.mu.Unlock()
	if _, err := cn.request(ctx, &pb.BaseCommand{Type: pb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: cmd}); err != nil {
		cn.removeConsumer(pc.id)
		return err
	}
	co.mu.Lock()
	if co.closed {
		co.mu.Unlock()
		cn.removeConsumer(pc.id)
		return ErrClosed
	}
	pc.cn, pc.consumed = cn, 0
	pc.bo.reset()
	permits := pc.permits
	co.mu.Unlock()
	return cn.flow(pc.id, uint32(permits))
}

func (pc *partConsumer) subscribeLocked() *pb.CommandSubscribe {
	o := pc.co.opts
	cmd := &pb.CommandSubscribe{Topic: proto.String(pc.topic), Subscription: proto.String(o.Subscription),
		SubType: o.Type.Enum(), ConsumerId: proto.Uint64(pc.id), Durable: proto.Bool(o.Durable),
		InitialPosition: o.InitialPosition.Enum(), ForceTopicCreation: proto.Bool(true)}
	if o.Name != "" {
		cmd.ConsumerName = proto.String(o.Name)
	}
	if o.Priority > 0 {
		cmd.PriorityLevel = proto.Int32(o.Priority)
	}
	if !o.Durable {
		switch {
		case pc.start != nil:
			cmd.StartMessageId = &pb.MessageIdData{LedgerId: proto.Uint64(pc.start.Ledger), EntryId: proto.Uint64(pc.start.Entry)}
			if pc.start.BatchIndex >= 0 {
				cmd.StartMessageId.BatchIndex = proto.Int32(pc.start.BatchIndex)
			}
		case pc.earliest:
			cmd.StartMessageId = &pb.MessageIdData{LedgerId: proto.Uint64(math.MaxUint64), EntryId: proto.Uint64(math.MaxUint64)}
		case o.Start != nil: // the latest
			cmd.StartMessageId = &pb.MessageIdData{LedgerId: proto.Uint64(math.MaxInt64), EntryId: proto.Uint64(math.MaxInt64)}
		}
	}
	return cmd
}

// disconnected: the connection closed or the broker closed the consumer; what was queued
// from it goes (the broker sends it again), and it comes back.
func (pc *partConsumer) disconnected(c *conn) {
	co := pc.co
	co.mu.Lock()
	if pc.cn != c || co.closed {
		co.mu.Unlock()
		return
	}
	pc.cn = nil
	co.dropQueuedLocked(pc)
	co.dropPartitionChunksLocked(pc.partition)
	co.mu.Unlock()
	go pc.reconnect()
}

func (pc *partConsumer) reconnect() {
	c := pc.co.c
	for {
		select {
		case <-time.After(pc.bo.delay()):
		case <-c.ctx.Done():
			return
		}
		ctx, cancel := context.WithTimeout(c.ctx, c.cfg.OperationTimeout)
		err := pc.connect(ctx)
		cancel()
		if err == nil {
			return
		}
		c.log.Debug().Err(err).Str("topic", pc.topic).Msg("consumer not back yet")
		if fatal(err) {
			pc.co.mu.Lock()
			pc.failed = err
			pc.co.mu.Unlock()
			pc.co.wake()
			return
		}
	}
}

// dropQueuedLocked removes the partition's messages from the queue.
func (co *Consumer) dropQueuedLocked(pc *partConsumer) int {
	kept := co.queue[:0]
	dropped := 0
	for _, m := range co.queue {
		if co.partOf(m.ID.Partition) == pc {
			co.addBytes(-m.size)
			dropped++
			continue
		}
		kept = append(kept, m)
	}
	clear(co.queue[len(kept):])
	co.queue = kept
	return dropped
}

// partOf is the partition consumer of a message id's partition.
func (co *Consumer) partOf(partition int32) *partConsumer {
	if partition < 0 || len(co.parts) == 1 {
		return co.parts[0]
	}
	if int(partition) >= len(co.parts) {
		return nil
	}
	return co.parts[partition]
}

// Unsubscribe removes the subscription at every partition's broker; the consumer ends.
func (co *Consumer) Unsubscribe(ctx context.Context) error {
	co.mu.Lock()
	parts := append([]*partConsumer(nil), co.parts...)
	co.mu.Unlock()
	for _, pc := range parts {
		co.mu.Lock()
		cn := pc.cn
		co.mu.Unlock()
		if cn == nil {
			return &Error{Code: pb.ServerError_ServiceNotReady, Message: "not connected to " + pc.topic}
		}
		_, err := cn.request(ctx, &pb.BaseCommand{Type: pb.BaseCommand_UNSUBSCRIBE.Enum(),
			Unsubscribe: &pb.CommandUnsubscribe{ConsumerId: proto.Uint64(pc.id)}})
		if err != nil {
			return err
		}
	}
	co.Close()
	return nil
}

// ReachedEnd reports whether every partition reached the end of a terminated topic.
func (co *Consumer) ReachedEnd() bool {
	co.mu.Lock()
	defer co.mu.Unlock()
	for _, pc := range co.parts {
		if !pc.reachedEnd {
			return false
		}
	}
	return true
}

func (pc *partConsumer) endOfTopic() {
	pc.co.mu.Lock()
	pc.reachedEnd = true
	pc.co.mu.Unlock()
}

// Close ends the consumer; Receive returns ErrClosed.
func (co *Consumer) Close() {
	co.mu.Lock()
	if co.closed {
		co.mu.Unlock()
		return
	}
	co.closed = true
	co.addBytes(-co.bytes)
	co.queue = nil
	co.chunks = assembler{}
	for _, pc := range co.parts {
		if pc.cn != nil {
			pc.cn.removeConsumer(pc.id)
			pc.cn.write(nil, &pb.BaseCommand{Type: pb.BaseCommand_CLOSE_CONSUMER.Enum(), CloseConsumer: &pb.CommandCloseConsumer{
				ConsumerId: proto.Uint64(pc.id), RequestId: proto.Uint64(co.c.nextID())}})
		}
	}
	co.tracker.stop()
	co.mu.Unlock()
	co.wake()
	co.dlq.mu.Lock()
	if co.dlq.producer != nil {
		co.dlq.producer.Close()
	}
	co.dlq.mu.Unlock()
}

func (co *Consumer) wake() {
	select {
	case co.notify <- struct{}{}:
	default:
	}
}

// addBytes changes what the queue holds, and tells Config.Buffered.
func (co *Consumer) addBytes(d int) {
	co.bytes += d
	if b := co.c.cfg.Buffered; b != nil && d != 0 {
		b.Add(float64(d))
	}
}
