package pulsarclient

import (
	"context"
	"errors"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// message takes a MESSAGE from the broker (on the connection's goroutine): its messages join
// the queue, or are dropped (before a reader's start, undecryptable, for the dead-letter
// topic) with their permits given back. A chunk joins its message's assembly; the message
// is decoded once its last chunk is in.
func (pc *partConsumer) message(m *pb.CommandMessage, payload []byte) {
	co := pc.co
	entry := MessageID{Ledger: m.GetMessageId().GetLedgerId(), Entry: m.GetMessageId().GetEntryId(), Partition: pc.partition, BatchIndex: -1}
	ids := []MessageID{entry} // what acknowledges an unreadable message
	md, data, err := readEntry(payload)
	var msgs []*Message
	switch {
	case err == nil && isChunk(md, co.opts.CryptoConsume):
		co.mu.Lock()
		var a *assembly
		if !co.closed {
			a = pc.chunkLocked(md, data, entry)
		}
		co.mu.Unlock()
		if a == nil {
			return
		}
		ids = a.ids
		msgs, err = co.c.codecs.assembled(m, md, a, pc.partition, co.chunkLimit(), co.opts.CryptoConsume)
	case err == nil:
		msgs, err = co.c.codecs.decodeMessages(m, md, data, pc.partition, co.c.cfg.MaxMessageSize, co.opts.CryptoConsume)
	}
	co.mu.Lock()
	defer co.mu.Unlock()
	if co.closed {
		return
	}
	if err != nil {
		pc.unreadableLocked(err, ids)
		return
	}
	pc.enqueueLocked(m, entry, msgs)
}

// unreadableLocked drops what cannot be read: acknowledged if it cannot be decrypted and
// the consumer discards such, or (as Pulsar's clients do) as corrupt unless it is only
// encrypted (then it stays for a client that can decrypt it); its permit comes back.
func (pc *partConsumer) unreadableLocked(err error, ids []MessageID) {
	switch {
	case errors.Is(err, errUndecryptable) && pc.co.opts.CryptoDiscard:
		pc.ackAllLocked(ids, nil)
	case !errors.Is(err, errUndecryptable):
		pc.co.c.log.Warn().Err(err).Str("topic", pc.topic).Msg("discarding a message the proxy cannot read")
		pc.ackAllLocked(ids, pb.CommandAck_ChecksumMismatch.Enum())
	}
	pc.returnPermitsLocked(1)
}

// enqueueLocked queues an entry's messages, but those before a reader's start and those
// redelivered past MaxRedeliverCount (for the dead-letter topic).
func (pc *partConsumer) enqueueLocked(m *pb.CommandMessage, entry MessageID, msgs []*Message) {
	co := pc.co
	o := co.opts
	for _, msg := range msgs {
		msg.Topic = pc.topic
	}
	msgs = pc.afterStartLocked(msgs)
	if o.MaxRedeliverCount > 0 && m.GetRedeliveryCount() >= uint32(o.MaxRedeliverCount) && len(msgs) > 0 && co.deadLetterable(msgs) {
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
	if pc.cn == nil || pc.consumed < max(1, pc.permits/2) || co.heldLocked() {
		return
	}
	n := pc.consumed
	pc.consumed = 0
	pc.cn.flow(pc.id, uint32(n))
}

// heldLocked reports whether permits are held back: the consumer holds more than its byte
// bound and the client has messages to take. Chunked messages being assembled count, but
// hold nothing back by themselves: they need more chunks to be taken at all (and are
// bounded by chunkLimit).
func (co *Consumer) heldLocked() bool {
	limit := co.opts.MaxQueuedBytes
	return limit > 0 && co.bytes > limit && len(co.queue) > 0
}

// flowAllLocked grants every partition what it may have been held back.
func (co *Consumer) flowAllLocked() {
	for _, pc := range co.parts {
		co.flowLocked(pc)
	}
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
		if len(co.queue) > 0 && co.tracker.room(co.queue[0]) {
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
	co.tracker.delivered(m)
	co.flowLocked(pc)
	if co.opts.MaxQueuedBytes > 0 && !co.heldLocked() {
		co.flowAllLocked() // permits held back while the queue was over its bytes
	}
	return m
}

// QueuedBytes is what the queue holds.
func (co *Consumer) QueuedBytes() int {
	co.mu.Lock()
	defer co.mu.Unlock()
	return co.bytes
}

// ackAllLocked acknowledges whole entries, in one ACK (validation: as corrupt).
func (pc *partConsumer) ackAllLocked(entries []MessageID, validation *pb.CommandAck_ValidationError) {
	if pc.cn == nil || len(entries) == 0 {
		return // the broker sends them again; they are acknowledged then
	}
	ids := make([]*pb.MessageIdData, len(entries))
	for i, e := range entries {
		ids[i] = &pb.MessageIdData{LedgerId: proto.Uint64(e.Ledger), EntryId: proto.Uint64(e.Entry)}
	}
	pc.cn.write(nil, &pb.BaseCommand{Type: pb.BaseCommand_ACK.Enum(), Ack: &pb.CommandAck{
		ConsumerId: proto.Uint64(pc.id), AckType: pb.CommandAck_Individual.Enum(), ValidationError: validation, MessageId: ids}})
}

// deadLetterable reports whether messages can go to the dead-letter topic: the proxy's
// producer does not cut messages in chunks, so a chunked one over the brokers' message size
// cannot, and is delivered again instead (where it would be retried, held and uncounted).
func (co *Consumer) deadLetterable(msgs []*Message) bool {
	limit := co.c.cfg.MaxMessageSize
	for _, m := range msgs {
		if limit > 0 && m.chunks != nil && len(m.Payload) > limit {
			return false
		}
	}
	return true
}
