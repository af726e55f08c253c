package pulsarclient

import (
	"context"
	"fmt"
	"maps"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// deadLetters is a consumer's producer on its dead-letter topic, made on first use.
type deadLetters struct {
	mu       sync.Mutex
	producer *Producer
}

// deadLetter sends an entry's messages to the dead-letter topic and acknowledges the entry;
// if that fails, the entry is redelivered instead (and tried again next time).
func (co *Consumer) deadLetter(entry MessageID, msgs []*Message) {
	p, err := co.deadLetterProducer()
	if err == nil {
		err = sendAll(p, co.opts.Subscription, msgs)
	}
	if err != nil {
		co.c.log.Warn().Err(err).Str("topic", co.opts.Topic).Str("dead_letter_topic", co.opts.DeadLetterTopic).
			Msg("could not send to the dead-letter topic; the message is redelivered")
		co.mu.Lock()
		co.tracker.dead[entry] = msgs
		if pc := co.partOf(entry.Partition); pc != nil && pc.cn != nil && !co.closed {
			pc.cn.write(nil, &pb.BaseCommand{Type: pb.BaseCommand_REDELIVER_UNACKNOWLEDGED_MESSAGES.Enum(),
				RedeliverUnacknowledgedMessages: &pb.CommandRedeliverUnacknowledgedMessages{ConsumerId: proto.Uint64(pc.id),
					MessageIds: []*pb.MessageIdData{{LedgerId: proto.Uint64(entry.Ledger), EntryId: proto.Uint64(entry.Entry)}}}})
		}
		co.mu.Unlock()
		return
	}
	co.mu.Lock()
	defer co.mu.Unlock()
	if pc := co.partOf(entry.Partition); pc != nil && !co.closed {
		delete(co.tracker.batches, entry)
		co.tracker.forget(entry)
		pc.ackLocked(entry, nil)
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
// batch index of a batched message.
func (m MessageID) String() string {
	s := fmt.Sprintf("%d:%d:%d", m.Ledger, m.Entry, m.Partition)
	if m.BatchIndex >= 0 {
		s += fmt.Sprintf(":%d", m.BatchIndex)
	}
	return s
}
