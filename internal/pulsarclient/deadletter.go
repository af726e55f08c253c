package pulsarclient

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"
)

// deadLetters is a consumer's producer on its dead-letter topic, made on first use, and
// the backoff between failed attempts to send there.
type deadLetters struct {
	mu       sync.Mutex
	producer *Producer
	retry    backoff // guarded by Consumer.mu
	failing  bool    // guarded by Consumer.mu: the last attempt failed (logged once)
}

// deadLetter sends an entry's messages to the dead-letter topic and acknowledges the entry.
// If that fails (the topic refused, a broker away), the entry is tried again after a backoff
// that grows to 30 s: a dead-letter topic that always refuses must not cost a lookup and a
// log line per broker round trip. An entry the client had (delivered) and acknowledged while
// the attempt ran is not tried again: its state is gone, and must stay so.
func (co *Consumer) deadLetter(entry MessageID, msgs []*Message, delivered bool) {
	p, err := co.deadLetterProducer()
	if err == nil {
		err = sendAll(p, co.opts.Subscription, msgs)
	}
	co.mu.Lock()
	defer co.mu.Unlock()
	if co.closed {
		return
	}
	if _, still := co.tracker.outstanding[entry]; err != nil && delivered && !still {
		return
	}
	if err != nil {
		if !co.dlq.failing {
			co.c.log.Warn().Err(err).Str("topic", co.opts.Topic).Str("dead_letter_topic", co.opts.DeadLetterTopic).
				Msg("could not send to the dead-letter topic; trying again with a backoff")
		}
		co.dlq.failing = true
		at := time.Now().Add(co.dlq.retry.delay())
		co.tracker.dead[entry] = msgs
		co.tracker.nacks[entry] = at
		co.tracker.arm(at)
		return
	}
	co.dlq.failing = false
	co.dlq.retry.reset()
	if pc := co.partOf(entry.Partition); pc != nil {
		ids := []MessageID{entry}
		if len(msgs) == 1 && msgs[0].chunks != nil {
			ids = msgs[0].chunks // a chunked message: every chunk
		}
		co.tracker.forget(entry)
		pc.ackAllLocked(ids, nil)
	}
}

func (co *Consumer) deadLetterProducer() (*Producer, error) {
	d := &co.dlq
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.producer != nil {
		return d.producer, nil
	}
	ctx, cancel := context.WithTimeout(co.c.ctx, co.c.cfg.OperationTimeout)
	defer cancel()
	p, err := co.c.CreateProducer(ctx, ProducerOptions{Topic: co.opts.DeadLetterTopic, InitialSequenceID: -1,
		SendTimeout: co.c.cfg.OperationTimeout})
	if err != nil {
		return nil, err
	}
	d.producer = p
	return p, nil
}

// sendAll sends copies of msgs, each with where it came from, and waits for them.
func sendAll(p *Producer, subscription string, msgs []*Message) error {
	errs := make(chan error, len(msgs))
	for _, m := range msgs {
		props := maps.Clone(m.Properties)
		if props == nil {
			props = map[string]string{}
		}
		for k, v := range map[string]string{propertyRealTopic: m.Topic, propertyRealSubscription: subscription,
			propertyOriginMessageID: m.ID.String(), propertyOriginMessageIDOld: m.ID.String()} {
			if _, ok := props[k]; !ok {
				props[k] = v
			}
		}
		out := &OutMessage{Payload: m.Payload, Properties: props}
		if m.HasKey {
			k := m.Key
			out.Key = &k
		}
		p.Send(out, func(_ MessageID, err error) { errs <- err })
	}
	for range msgs {
		if err := <-errs; err != nil {
			return fmt.Errorf("dead-letter topic: %w", err)
		}
	}
	return nil
}

// String is the id as Pulsar's MessageIdImpl prints it: ledger:entry:partition, and the
// batch index of a batched message; a chunked message's first chunk, ';', its last (as
// ChunkMessageIdImpl prints it).
func (m MessageID) String() string {
	s := fmt.Sprintf("%d:%d:%d", m.Ledger, m.Entry, m.Partition)
	if m.BatchIndex >= 0 {
		s += fmt.Sprintf(":%d", m.BatchIndex)
	}
	if m.Chunked {
		s = fmt.Sprintf("%d:%d:%d;", m.FirstLedger, m.FirstEntry, m.Partition) + s
	}
	return s
}
