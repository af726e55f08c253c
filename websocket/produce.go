package websocket

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/edge"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/pulsarclient"
	"github.com/pulsar-proxy/pulsar-proxy/websocket/wsapi"
)

// produce reads the client's messages and sends them; each gets its ack in turn. At most
// pending messages (and MaxBufferedBytes of payload) are in flight, their acks included:
// beyond that the proxy stops reading the client, whose sends wait.
func (ss *session) produce(p *pulsarclient.Producer, pending int) {
	defer p.Close()
	b := newBudget(pending, ss.s.cfg.MaxBufferedBytes, ss.s.metrics)
	defer b.releaseAll()
	acks := make(chan ack, pending)
	go ss.writeAcks(acks, b)
	var buf []byte
	for {
		var err error
		if buf, err = ss.read(buf); err != nil {
			return
		}
		size := len(buf) * 3 / 4 // the payload, roughly: the message is mostly its base64
		if b.acquire(ss.ctx, size) != nil {
			return
		}
		out, fail := ss.message(buf)
		if fail != nil {
			ss.s.metrics.sendErrs.Inc()
			acks <- ack{fail.AppendJSON(nil), size}
			continue
		}
		ctxStr, hasCtx := out.context, out.hasContext
		n := len(out.msg.Payload)
		if !ss.pacePublishing(out.msg.Size()) {
			return
		}
		p.Send(out.msg, func(id pulsarclient.MessageID, err error) {
			if err != nil {
				ss.s.metrics.sendErrs.Inc()
				ss.log.Debug().Err(err).Msg("message not stored")
				acks <- ack{wsapi.AckError(wsapi.UnknownError, err.Error(), ctxStr, hasCtx).AppendJSON(nil), size}
				return
			}
			ss.s.metrics.messages.WithLabelValues(dirProduced).Inc()
			ss.s.metrics.bytes.WithLabelValues(dirProduced).Add(float64(n))
			acks <- ack{wsapi.AckOK(encodeID(id), ctxStr, hasCtx).AppendJSON(nil), size}
		})
	}
}

// pacePublishing waits, before a message of n bytes is sent, as long as the role's publish
// rate (shared with its sessions on every plane) asks: meanwhile nothing is read from the
// client, whose sends wait. False: the session ended meanwhile, the message is not sent.
func (ss *session) pacePublishing(n int) bool {
	l := ss.s.cfg.Policy.PublishRate(ss.role)
	if l == nil {
		return true
	}
	paused := edge.Pace(ss.ctx, l, n)
	if c := ss.s.cfg.PublishPaused; c != nil {
		c.Add(paused.Seconds())
	}
	return ss.ctx.Err() == nil
}

// ack is an ack to write and the budget its message held.
type ack struct {
	json []byte
	size int
}

func (ss *session) writeAcks(acks <-chan ack, b *budget) {
	for {
		select {
		case a := <-acks:
			// The message is out of flight before its client hears so: a client that
			// reads its ack then finds the buffered bytes without it.
			b.release(a.size)
			if err := ss.write(a.json); err != nil {
				ss.cancel()
				return
			}
		case <-ss.ctx.Done():
			return
		}
	}
}

// outgoing is a producer message read and checked, or the ack refusing it.
type outgoing struct {
	msg        *pulsarclient.OutMessage
	context    string
	hasContext bool
}

// message reads one producer message as the service does: bad JSON is answered
// send-error:3 without its context, a bad payload or event time send-error:7.
func (ss *session) message(buf []byte) (outgoing, *wsapi.ProducerAck) {
	m, err := wsapi.DecodeProducerMessage(buf)
	if err != nil {
		a := wsapi.AckError(wsapi.FailedToDeserializeFromJSON, err.Error(), "", false)
		return outgoing{}, &a
	}
	o := outgoing{msg: &pulsarclient.OutMessage{ReplicationClusters: m.ReplicationClusters}}
	o.context, o.hasContext = m.ContextString()
	bad := func(msg string) (outgoing, *wsapi.ProducerAck) {
		a := wsapi.AckError(wsapi.PayloadEncodingError, msg, o.context, o.hasContext)
		return outgoing{}, &a
	}
	if o.msg.Properties, err = m.PropertyMap(); err != nil {
		return bad(err.Error())
	}
	if !m.HasPayload() {
		return bad("the message has no payload")
	}
	if o.msg.Payload, err = m.DecodePayload(); err != nil {
		return bad("Invalid Base64 message-payload error=" + err.Error())
	}
	if m.Key != nil && !m.Key.Null() {
		k := m.Key.String()
		o.msg.Key = &k
	}
	if m.EventTime != nil && !m.EventTime.Null() {
		t, err := wsapi.ParseTime(m.EventTime.String())
		if err != nil {
			return bad(fmt.Sprintf("Text '%s' could not be parsed: %v", m.EventTime.String(), err))
		}
		o.msg.EventTime = uint64(t)
	}
	if m.DeliverAt > 0 {
		o.msg.DeliverAt = int64(m.DeliverAt)
	}
	if m.DeliverAfterMs > 0 {
		o.msg.DeliverAt = time.Now().UnixMilli() + int64(m.DeliverAfterMs)
	}
	if msg := encryption(&m, o.msg); msg != "" {
		return bad(msg)
	}
	return o, nil
}

// encryption takes a client-side encrypted message's own fields; "" or why they are bad.
func encryption(m *wsapi.ProducerMessage, out *pulsarclient.OutMessage) string {
	if m.EncryptionParam != nil && *m.EncryptionParam != "" {
		p, err := wsapi.DecodeBase64(*m.EncryptionParam)
		if err != nil {
			return "Invalid Base64 encryptionParam error=" + err.Error()
		}
		out.EncryptionParam = p
	}
	switch {
	case m.CompressionType != nil && m.UncompressedMessageSize != nil:
		c, ok := pb.CompressionType_value[*m.CompressionType]
		if !ok {
			return "unknown compressionType " + *m.CompressionType
		}
		ct, size := pb.CompressionType(c), uint32(*m.UncompressedMessageSize)
		out.Compression, out.UncompressedSize = &ct, &size
	case m.CompressionType != nil && *m.CompressionType != "NONE", m.UncompressedMessageSize != nil:
		return "the params compressionType and uncompressedMessageSize should both empty or both non-empty"
	}
	return ""
}

func encodeID(id pulsarclient.MessageID) string {
	return wsapi.MessageID{Ledger: id.Ledger, Entry: id.Entry, Partition: id.Partition, BatchIndex: id.BatchIndex, BatchSize: id.BatchSize,
		Chunked: id.Chunked, FirstLedger: id.FirstLedger, FirstEntry: id.FirstEntry}.Encode()
}

// clientID is an id the client sent, as the proxy's client takes it.
func clientID(id wsapi.MessageID) pulsarclient.MessageID {
	return pulsarclient.MessageID{Ledger: id.Ledger, Entry: id.Entry, Partition: id.Partition, BatchIndex: id.BatchIndex, BatchSize: id.BatchSize,
		Chunked: id.Chunked, FirstLedger: id.FirstLedger, FirstEntry: id.FirstEntry}
}

// budget bounds a producer's messages in flight: their number and payload bytes.
type budget struct {
	mu             sync.Mutex
	n, bytes       int
	maxN, maxBytes int
	done           bool // the session ended: releases count no more
	wake           chan struct{}
	metrics        *Metrics
}

func newBudget(maxN, maxBytes int, m *Metrics) *budget {
	return &budget{maxN: maxN, maxBytes: maxBytes, wake: make(chan struct{}, 1), metrics: m}
}

// acquire waits for room for one more message of size bytes (one is always let through
// alone, however large).
func (b *budget) acquire(ctx context.Context, size int) error {
	for {
		b.mu.Lock()
		if b.n < b.maxN && (b.n == 0 || b.maxBytes <= 0 || b.bytes+size <= b.maxBytes) {
			b.n++
			b.bytes += size
			b.mu.Unlock()
			b.metrics.buffered.Add(float64(size))
			return nil
		}
		b.mu.Unlock()
		select {
		case <-b.wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (b *budget) release(size int) {
	b.mu.Lock()
	if b.done {
		b.mu.Unlock()
		return
	}
	b.n--
	b.bytes -= size
	b.mu.Unlock()
	b.metrics.buffered.Add(-float64(size))
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// releaseAll gives back what the session still holds when it ends.
func (b *budget) releaseAll() {
	b.mu.Lock()
	left := b.bytes
	b.n, b.bytes, b.done = 0, 0, true
	b.mu.Unlock()
	b.metrics.buffered.Add(-float64(left))
}
