package pulsarclient

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// ProducerOptions configure a producer.
type ProducerOptions struct {
	Topic string
	Name  string // "" lets the broker name it
	// InitialSequenceID: the first message gets the one after it; -1: after the broker's last.
	InitialSequenceID int64
	SendTimeout       time.Duration // 0: none
	RoundRobin        bool          // messages without a key go round the partitions (else to one)
	Murmur3           bool          // keys hash with Murmur3_32 (else Java's String.hashCode)
	Batching          bool
	BatchMaxMessages  int
	BatchMaxDelay     time.Duration
	Compression       pb.CompressionType
	// EncryptionKeys go in every message's metadata: the client encrypted the payloads.
	EncryptionKeys []*pb.EncryptionKeys
}

// batchMaxBytes flushes a batch at this size, as Pulsar's clients do by default.
const batchMaxBytes = 128 << 10

// OutMessage is a message to send.
type OutMessage struct {
	Payload             []byte
	Properties          map[string]string
	Key                 *string
	ReplicationClusters []string
	EventTime           uint64 // epoch ms; 0: none
	DeliverAt           int64  // epoch ms; 0: now
	// A client-side encrypted message's own encryption parameter and, when it compressed the
	// payload itself, the codec and the size before it.
	EncryptionParam  []byte
	Compression      *pb.CompressionType
	UncompressedSize *uint32
}

// SendResult gets a message's id once the broker stored it, or why it was not stored. It
// runs on a broker connection's goroutine (or a timer's) and must not block.
type SendResult func(id MessageID, err error)

// ErrSendTimeout: the broker did not store the message within the send timeout.
var ErrSendTimeout = errors.New("the message was not stored within the send timeout")

// Producer sends to a topic, over every partition of a partitioned one.
type Producer struct {
	c      *Client
	opts   ProducerOptions
	parts  []*partProducer
	rr     atomic.Uint32
	single int // the partition of SinglePartition routing
}

// CreateProducer makes a producer on opts.Topic: one per partition, each on its broker.
func (c *Client) CreateProducer(ctx context.Context, opts ProducerOptions) (*Producer, error) {
	n, err := c.Partitions(ctx, opts.Topic)
	if err != nil {
		return nil, err
	}
	p := &Producer{c: c, opts: opts}
	topics := partitionTopics(opts.Topic, n)
	p.single = rand.IntN(len(topics))
	for i, t := range topics {
		part := int32(-1)
		if n > 0 {
			part = int32(i)
		}
		p.parts = append(p.parts, &partProducer{p: p, topic: t, partition: part, id: c.nextID()})
	}
	if err := startAll(ctx, len(p.parts), func(ctx context.Context, i int) error { return p.parts[i].start(ctx) }); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// partitionTopics names a topic's partitions (the topic itself when n is 0).
func partitionTopics(topic string, n int) []string {
	if n == 0 {
		return []string{topic}
	}
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-partition-%d", topic, i)
	}
	return out
}

// startAll runs start for 0..n-1 at once and returns the first error.
func startAll(ctx context.Context, n int, start func(ctx context.Context, i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Go(func() { errs[i] = start(ctx, i) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Name is the producer's name (the first partition's, as the broker named it).
func (p *Producer) Name() string {
	pp := p.parts[0]
	pp.mu.Lock()
	defer pp.mu.Unlock()
	return pp.name
}

// Send sends m and calls done with its id. It does not block: the caller bounds what is in
// flight.
func (p *Producer) Send(m *OutMessage, done SendResult) {
	p.parts[p.route(m)].send(m, done)
}

// route picks the partition: a key's hash, else one partition or the next in turn.
func (p *Producer) route(m *OutMessage) int {
	n := len(p.parts)
	switch {
	case n == 1:
		return 0
	case m.Key != nil:
		h := javaStringHash(*m.Key)
		if p.opts.Murmur3 {
			h = murmur3Hash(*m.Key)
		}
		return int(h % uint32(n))
	case p.opts.RoundRobin:
		return int(p.rr.Add(1) % uint32(n))
	}
	return p.single
}

// Close stops the producer; messages not yet stored get no answer.
func (p *Producer) Close() {
	for _, pp := range p.parts {
		pp.close()
	}
}

// partProducer is the producer of one partition (or of a topic without partitions).
type partProducer struct {
	p         *Producer
	topic     string
	partition int32
	id        uint64
	mu        sync.Mutex
	cn        *conn // nil while not connected
	name      string
	epoch     uint64
	nextSeq   uint64
	pending   []*pendingSend // sent, not yet stored, in sequence order
	batch     batchBuf
	batchT    *time.Timer
	timeoutT  *time.Timer
	bo        backoff
	err       error // the producer gave up: every send fails with it
	closed    bool
	started   bool
}

// pendingSend is one SEND frame waiting for its receipt.
type pendingSend struct {
	seq      uint64
	frame    []byte
	done     []SendResult // one per message of a batch
	deadline time.Time
}

// start creates the producer at its broker, trying again while the broker is not ready,
// within the operation timeout.
func (pp *partProducer) start(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, pp.p.c.cfg.OperationTimeout)
	defer cancel()
	for {
		err := pp.connect(ctx)
		if err == nil || !retryableFirst(err) {
			return err
		}
		select {
		case <-time.After(pp.bo.delay()):
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		}
	}
}

// connect looks the partition up, opens or reuses the broker connection and creates the
// producer there; pending messages are sent again.
func (pp *partProducer) connect(ctx context.Context) error {
	addr, err := pp.p.c.lookup(ctx, pp.topic)
	if err != nil {
		return err
	}
	cn, err := pp.p.c.conn(ctx, addr)
	if err != nil {
		return err
	}
	if !cn.addProducer(pp.id, pp) {
		return cn.closeErr()
	}
	pp.mu.Lock()
	cmd := &pb.CommandProducer{Topic: proto.String(pp.topic), ProducerId: proto.Uint64(pp.id),
		Epoch: proto.Uint64(pp.epoch), UserProvidedProducerName: proto.Bool(pp.p.opts.Name != "")}
	if name := pp.nameLocked(); name != "" {
		cmd.ProducerName = proto.String(name)
	}
	pp.epoch++
	pp.mu.Unlock()
	resp, err := cn.request(ctx, &pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: cmd})
	if err != nil {
		cn.removeProducer(pp.id)
		return err
	}
	return pp.connected(cn, resp.GetProducerSuccess())
}

func (pp *partProducer) nameLocked() string {
	if pp.name != "" {
		return pp.name
	}
	return pp.p.opts.Name
}

// connected takes the broker's answer: the name, the first sequence id (the first time),
// and sends what is pending again.
func (pp *partProducer) connected(cn *conn, ps *pb.CommandProducerSuccess) error {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if pp.closed {
		cn.removeProducer(pp.id)
		return ErrClosed
	}
	if !pp.started {
		pp.started = true
		pp.name = ps.GetProducerName()
		last := max(ps.GetLastSequenceId(), pp.p.opts.InitialSequenceID)
		pp.nextSeq = uint64(last + 1)
	}
	pp.cn = cn
	pp.bo.reset()
	for _, s := range pp.pending {
		if cn.writeFrame(s.frame) != nil {
			break // the connection closed: disconnected brings the producer back again
		}
	}
	return nil
}

// disconnected: the connection closed or the broker closed the producer; it comes back.
func (pp *partProducer) disconnected(c *conn) {
	pp.mu.Lock()
	if pp.cn != c || pp.closed {
		pp.mu.Unlock()
		return
	}
	pp.cn = nil
	pp.mu.Unlock()
	go pp.reconnect()
}

// reconnect brings the producer back with backoff until it is, it is closed, or a fatal
// refusal ends it (every pending and later send then fails).
func (pp *partProducer) reconnect() {
	c := pp.p.c
	for {
		select {
		case <-time.After(pp.bo.delay()):
		case <-c.ctx.Done():
			return
		}
		ctx, cancel := context.WithTimeout(c.ctx, c.cfg.OperationTimeout)
		err := pp.connect(ctx)
		cancel()
		if err == nil {
			return
		}
		c.log.Debug().Err(err).Str("topic", pp.topic).Msg("producer not back yet")
		if fatal(err) {
			pp.fail(err)
			return
		}
	}
}

// fail ends the producer for good: pending messages and later sends fail with err.
func (pp *partProducer) fail(err error) {
	pp.mu.Lock()
	pp.err = err
	pending := pp.pending
	pp.pending = nil
	pp.mu.Unlock()
	for _, s := range pending {
		s.fail(err)
	}
}

func (s *pendingSend) fail(err error) {
	for _, d := range s.done {
		d(MessageID{}, err)
	}
}

func (pp *partProducer) close() {
	pp.mu.Lock()
	pp.closed = true
	cn := pp.cn
	pp.cn = nil
	for _, t := range []*time.Timer{pp.batchT, pp.timeoutT} {
		if t != nil {
			t.Stop()
		}
	}
	pp.mu.Unlock()
	if cn != nil {
		cn.removeProducer(pp.id)
		cn.write(nil, &pb.BaseCommand{Type: pb.BaseCommand_CLOSE_PRODUCER.Enum(), CloseProducer: &pb.CommandCloseProducer{
			ProducerId: proto.Uint64(pp.id), RequestId: proto.Uint64(pp.p.c.nextID())}})
	}
}
