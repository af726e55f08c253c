package pulsarclient

import (
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// tracker keeps a consumer's acknowledgement state, guarded by Consumer.mu: which slots of
// each batch are still unacknowledged, what was received and not acknowledged (for the ack
// timeout), what was negatively acknowledged and when it is due again, and the messages a
// redelivery sends to the dead-letter topic instead. Every map holds at most what the
// brokers sent ahead, bounded by the queue's permits.
type tracker struct {
	co      *Consumer
	batches map[MessageID][]bool // entry → slots acknowledged
	unacked map[MessageID]time.Time
	nacks   map[MessageID]time.Time
	dead    map[MessageID][]*Message
	timer   *time.Timer
	timerAt time.Time
	stopped bool
}

func (t *tracker) init(co *Consumer) {
	t.co = co
	t.batches = map[MessageID][]bool{}
	t.unacked = map[MessageID]time.Time{}
	t.nacks = map[MessageID]time.Time{}
	t.dead = map[MessageID][]*Message{}
}

func (t *tracker) stop() {
	t.stopped = true
	if t.timer != nil {
		t.timer.Stop()
	}
}

// delivered: an entry's message went to the client; with an ack timeout it is watched.
func (t *tracker) delivered(entry MessageID) {
	if d := t.co.opts.AckTimeout; d > 0 {
		if _, ok := t.unacked[entry]; !ok {
			t.unacked[entry] = time.Now().Add(d)
			t.arm(time.Now().Add(d))
		}
	}
}

func (t *tracker) deadLetterCandidate(entry MessageID, msgs []*Message) { t.dead[entry] = msgs }

// redeliverSoon has an entry redelivered (or dead-lettered) at the next tick.
func (t *tracker) redeliverSoon(entry MessageID) {
	t.nacks[entry] = time.Now()
	t.arm(time.Now())
}

// arm makes the timer fire by at.
func (t *tracker) arm(at time.Time) {
	if t.stopped {
		return
	}
	if t.timer != nil && !t.timerAt.IsZero() && !at.Before(t.timerAt) {
		return
	}
	t.timerAt = at
	d := max(time.Until(at), time.Millisecond)
	if t.timer == nil {
		t.timer = time.AfterFunc(d, t.co.tick)
		return
	}
	t.timer.Reset(d)
}

// maxBatchSize bounds the batch size an ack may claim: the id comes from the client, and its
// slots are allocated as claimed. No batch in a frame of at most a few MiB holds more.
const maxBatchSize = 1 << 16

// Ack acknowledges a message: its entry once every slot of a batch is. An id no batch can
// have (a size over maxBatchSize, or other than the first ack of its entry claimed) is
// ignored.
func (co *Consumer) Ack(id MessageID) {
	co.mu.Lock()
	defer co.mu.Unlock()
	pc := co.partOf(id.Partition)
	if co.closed || pc == nil || id.BatchSize > maxBatchSize {
		return
	}
	entry := id.entry()
	if id.BatchIndex >= 0 && id.BatchSize > 1 && int(id.BatchIndex) < int(id.BatchSize) {
		slots := co.tracker.batches[entry]
		if slots == nil {
			slots = make([]bool, id.BatchSize)
			co.tracker.batches[entry] = slots
		}
		if len(slots) != int(id.BatchSize) {
			return
		}
		slots[id.BatchIndex] = true
		for _, done := range slots {
			if !done {
				return
			}
		}
		delete(co.tracker.batches, entry)
	}
	co.tracker.forget(entry)
	pc.ackLocked(entry, nil)
}

func (t *tracker) forget(entry MessageID) {
	delete(t.unacked, entry)
	delete(t.nacks, entry)
	delete(t.dead, entry)
}

// Nack has a message's entry delivered again after the negative-ack delay.
func (co *Consumer) Nack(id MessageID) {
	co.mu.Lock()
	defer co.mu.Unlock()
	if co.closed || co.partOf(id.Partition) == nil {
		return
	}
	entry := id.entry()
	delete(co.tracker.unacked, entry)
	at := time.Now().Add(co.opts.NackDelay)
	co.tracker.nacks[entry] = at
	co.tracker.arm(at)
}

// tick redelivers what is due: negatively acknowledged entries past their delay and
// received ones past the ack timeout.
func (co *Consumer) tick() {
	co.mu.Lock()
	if co.closed {
		co.mu.Unlock()
		return
	}
	t := &co.tracker
	t.timerAt = time.Time{}
	now := time.Now()
	var due []MessageID
	next := time.Time{}
	for _, m := range []map[MessageID]time.Time{t.nacks, t.unacked} {
		for e, at := range m {
			if !at.After(now) {
				due = append(due, e)
				delete(m, e)
			} else if next.IsZero() || at.Before(next) {
				next = at
			}
		}
	}
	if !next.IsZero() {
		t.arm(next)
	}
	co.redeliverLocked(due)
	co.mu.Unlock()
}

// redeliverLocked asks the brokers to send entries again: those with dead-letter
// candidates go to the dead-letter topic instead; on an exclusive or failover subscription
// (which cannot redeliver single messages) everything unacknowledged comes again.
func (co *Consumer) redeliverLocked(entries []MessageID) {
	byPart := map[*partConsumer][]*pb.MessageIdData{}
	for _, e := range entries {
		if msgs, ok := co.tracker.dead[e]; ok {
			delete(co.tracker.dead, e)
			go co.deadLetter(e, msgs)
			continue
		}
		if pc := co.partOf(e.Partition); pc != nil {
			byPart[pc] = append(byPart[pc], &pb.MessageIdData{LedgerId: proto.Uint64(e.Ledger), EntryId: proto.Uint64(e.Entry)})
		}
	}
	shared := co.opts.Type == pb.CommandSubscribe_Shared || co.opts.Type == pb.CommandSubscribe_Key_Shared
	for pc, ids := range byPart {
		if pc.cn == nil {
			continue // the broker sends them again when the consumer comes back
		}
		cmd := &pb.CommandRedeliverUnacknowledgedMessages{ConsumerId: proto.Uint64(pc.id)}
		if shared {
			cmd.MessageIds = ids
		} else {
			dropped := co.dropQueuedLocked(pc)
			co.tracker.forgetPartition(pc.partition)
			pc.consumed += dropped
		}
		pc.cn.write(nil, &pb.BaseCommand{Type: pb.BaseCommand_REDELIVER_UNACKNOWLEDGED_MESSAGES.Enum(), RedeliverUnacknowledgedMessages: cmd})
		co.flowLocked(pc)
	}
}

func (t *tracker) forgetPartition(p int32) {
	for _, m := range []map[MessageID]time.Time{t.unacked, t.nacks} {
		for e := range m {
			if e.Partition == p {
				delete(m, e)
			}
		}
	}
}

// The properties a dead-lettered message carries, as Pulsar's clients set
// them: the topic it came from and its id there.
// (Pulsar 4.0.8 writes the origin id under two names, one of them misspelt, and the
// subscription.)
const (
	propertyRealTopic          = "REAL_TOPIC"
	propertyRealSubscription   = "REAL_SUBSCRIPTION"
	propertyOriginMessageID    = "ORIGIN_MESSAGE_ID"
	propertyOriginMessageIDOld = "ORIGIN_MESSAGE_IDY_TIME"
)
