package pulsarclient

import (
	"context"
	"errors"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// message takes a MESSAGE from the broker (on the connection's goroutine): its messages join
// the queue, or are dropped (before a reader's start, undecryptable, for the dead-letter
// topic) with their permits given back.
func (pc *partConsumer) message(m *pb.CommandMessage, payload []byte) {
	co := pc.co
	o := co.opts
	msgs, err := co.c.codecs.decodeEntry(m, payload, pc.partition, co.c.cfg.MaxMessageSize, o.CryptoConsume)
	entry := MessageID{Ledger: m.GetMessageId().GetLedgerId(), Entry: m.GetMessageId().GetEntryId(), Partition: pc.partition, BatchIndex: -1}
	co.mu.Lock()
	defer co.mu.Unlock()
	if co.closed {
		return
	}
	switch {
	case errors.Is(err, errUndecryptable) && o.CryptoDiscard:
		pc.ackLocked(entry, nil)
		pc.returnPermitsLocked(1)
		return
	case err != nil:
		// Unreadable (or encrypted, with nothing to do about it): as Pulsar's clients, the
		// entry is acknowledged as corrupt unless it is only encrypted (then it stays for a
		// client that can decrypt it), and its permit comes back.
		if !errors.Is(err, errUndecryptable) {
			co.c.log.Warn().Err(err).Str("topic", pc.topic).Msg("discarding a message the proxy cannot read")
			pc.ackLocked(entry, pb.CommandAck_ChecksumMismatch.Enum())
		}
		pc.returnPermitsLocked(1)
		return
	}
	for _, msg := range msgs {
		msg.Topic = pc.topic
	}
	msgs = pc.afterStartLocked(msgs)
	if o.MaxRedeliverCount > 0 && m.GetRedeliveryCount() >= uint32(o.MaxRedeliverCount) && len(msgs) > 0 {
		co.tracker.deadLetterCandidate(entry, msgs)
		if m.GetRedeliveryCount() > uint32(o.MaxRedeliverCount) {
			pc.returnPermitsLocked(len(msgs))
			co.tracker.redeliverSoon(entry)
			return
		}
	}
	for _, msg := range msgs {
		co.queue = append(co.queue, msg)
		co.addBytes(msg.size)
	}
	if len(msgs) > 0 {
		co.wake()
	}
}

// afterStartLocked drops what a reader must not see again: the messages up to its start id
// (the broker starts at the start's entry, so that a batch can be taken up where it was left).
func (pc *partConsumer) afterStartLocked(msgs []*Message) []*Message {
	s := pc.start
	if s == nil || pc.co.opts.Durable {
		return msgs
	}
	kept := msgs[:0]
	dropped := 0
	for _, m := range msgs {
		id := m.ID
		prior := id.Ledger == s.Ledger && (id.Entry < s.Entry ||
			(id.Entry == s.Entry && (id.BatchIndex < 0 || id.BatchIndex <= s.BatchIndex)))
		if prior {
			dropped++
			continue
		}
		kept = append(kept, m)
	}
	pc.returnPermitsLocked(dropped)
	return kept
}

// returnPermitsLocked counts n messages as taken from the queue without being received.
func (pc *partConsumer) returnPermitsLocked(n int) {
	if n == 0 {
		return
	}
	pc.consumed += n
	pc.co.flowLocked(pc)
}

// flowLocked grants a partition the permits its received messages freed, once they are
// half its share and the queue is within its byte bound.
func (co *Consumer) flowLocked(pc *partConsumer) {
	if pc.cn == nil || pc.consumed < max(1, pc.permits/2) {
		return
	}
	if limit := co.opts.MaxQueuedBytes; limit > 0 && co.bytes > limit {
		return
	}
	n := pc.consumed
	pc.consumed = 0
	pc.cn.flow(pc.id, uint32(n))
}

// ErrConsumerFailed wraps why a consumer gave up coming back.
var ErrConsumerFailed = errors.New("consumer ended")

// Receive takes the next message, waiting for one until ctx ends.
func (co *Consumer) Receive(ctx context.Context) (*Message, error) {
	for {
		co.mu.Lock()
		if co.closed {
			co.mu.Unlock()
			return nil, ErrClosed
		}
		if len(co.queue) > 0 {
			m := co.takeLocked()
			co.mu.Unlock()
			return m, nil
		}
		for _, pc := range co.parts {
			if pc.failed != nil {
				err := pc.failed
				co.mu.Unlock()
				return nil, errors.Join(ErrConsumerFailed, err)
			}
		}
		co.mu.Unlock()
		select {
		case <-co.notify:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// takeLocked takes the queue's head: its permit is counted, it is tracked until
// acknowledged, and a reader starts after it should it come back.
func (co *Consumer) takeLocked() *Message {
	m := co.queue[0]
	co.queue[0] = nil
	co.queue = co.queue[1:]
	co.addBytes(-m.size)
	pc := co.partOf(m.ID.Partition)
	if pc == nil {
		return m
	}
	pc.consumed++
	id := m.ID
	pc.start = &id
	co.tracker.delivered(m.ID.entry())
	co.flowLocked(pc)
	if limit := co.opts.MaxQueuedBytes; limit > 0 && co.bytes <= limit {
		for _, other := range co.parts { // permits held back while the queue was over its bytes
			co.flowLocked(other)
		}
	}
	return m
}

// QueuedBytes is what the queue holds.
func (co *Consumer) QueuedBytes() int {
	co.mu.Lock()
	defer co.mu.Unlock()
	return co.bytes
}

// ackLocked acknowledges a whole entry (validation: as corrupt).
func (pc *partConsumer) ackLocked(entry MessageID, validation *pb.CommandAck_ValidationError) {
	if pc.cn == nil {
		return // the broker sends it again; it is acknowledged then
	}
	pc.cn.write(nil, &pb.BaseCommand{Type: pb.BaseCommand_ACK.Enum(), Ack: &pb.CommandAck{
		ConsumerId: proto.Uint64(pc.id), AckType: pb.CommandAck_Individual.Enum(), ValidationError: validation,
		MessageId: []*pb.MessageIdData{{LedgerId: proto.Uint64(entry.Ledger), EntryId: proto.Uint64(entry.Entry)}}}})
}
