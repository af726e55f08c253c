package pulsarclient

import (
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// tracker keeps a consumer's acknowledgement state, guarded by Consumer.mu: the entries
// delivered and not yet acknowledged (outstanding, with their batch's size), which slots of
// each batch are acknowledged, what is watched by the ack timeout, what was negatively
// acknowledged and when it is due again, and the messages a redelivery sends to the
// dead-letter topic instead. Ids come from the client, so state is kept only for entries
// this consumer delivered: every map is a part of outstanding (or, for dead, of what the
// brokers sent), and outstanding is bounded by MaxUnacked.
type tracker struct {
	co          *Consumer
	outstanding map[MessageID][]bool // entry → its batch's slots delivered (nil: no batch)
	batches     map[MessageID][]bool // entry → its batch's slots acknowledged, or not to be
	unacked     map[MessageID]time.Time
	nacks       map[MessageID]time.Time
	dead        map[MessageID][]*Message
	chunked     map[MessageID][]MessageID // a chunked message's last entry → all its chunks' entries
	timer       *time.Timer
	timerAt     time.Time
	stopped     bool
}

func (t *tracker) init(co *Consumer) {
	t.co = co
	t.outstanding = map[MessageID][]bool{}
	t.batches = map[MessageID][]bool{}
	t.unacked = map[MessageID]time.Time{}
	t.nacks = map[MessageID]time.Time{}
	t.dead = map[MessageID][]*Message{}
	t.chunked = map[MessageID][]MessageID{}
}

func (t *tracker) stop() {
	t.stopped = true
	if t.timer != nil {
		t.timer.Stop()
	}
}

// delivered: a message went to the client; its entry is outstanding until acknowledged (a
// reader's are not: it acknowledges nothing), and with an ack timeout it is watched.
func (t *tracker) delivered(m *Message) {
	if t.co.opts.Start != nil {
		return
	}
	entry := m.ID.entry()
	if _, ok := t.outstanding[entry]; !ok {
		t.outstanding[entry] = m.carried
	}
	if m.chunks != nil {
		t.chunked[entry] = m.chunks
	}
	if d := t.co.opts.AckTimeout; d > 0 {
		if _, ok := t.unacked[entry]; !ok {
			t.unacked[entry] = time.Now().Add(d)
			t.arm(time.Now().Add(d))
		}
	}
}

func (t *tracker) deadLetterCandidate(entry MessageID, msgs []*Message) { t.dead[entry] = msgs }

// entries are what acknowledging or redelivering an entry covers: a chunked message's every
// chunk, else the entry.
func (t *tracker) entries(entry MessageID) []MessageID {
	if ids, ok := t.chunked[entry]; ok {
		return ids
	}
	return []MessageID{entry}
}

// watch has an entry the consumer did not deliver (a chunk of a message it could not
// assemble) redelivered after the ack timeout, as the Java consumer's trackMessage; without
// an ack timeout, and at MaxUnacked entries watched, nothing is done.
func (t *tracker) watch(entry MessageID) {
	d := t.co.opts.AckTimeout
	if d <= 0 || t.co.opts.Start != nil || t.full() || len(t.unacked) >= t.limit() {
		return
	}
	if _, ok := t.unacked[entry]; !ok {
		t.unacked[entry] = time.Now().Add(d)
		t.arm(time.Now().Add(d))
	}
}

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

// DefaultMaxUnacked is ConsumerOptions.MaxUnacked's default: what Pulsar's brokers allow a
// consumer of a shared subscription (maxUnackedMessagesPerConsumer).
const DefaultMaxUnacked = 50_000

func (t *tracker) limit() int {
	if limit := t.co.opts.MaxUnacked; limit > 0 {
		return limit
	}
	return DefaultMaxUnacked
}

// full reports whether no more entries may be delivered until some are acknowledged.
func (t *tracker) full() bool { return len(t.outstanding) >= t.limit() }

// room reports whether m may be delivered: below MaxUnacked, or a message of an entry
// outstanding already (a redelivery adds nothing to hold).
func (t *tracker) room(m *Message) bool {
	if !t.full() {
		return true
	}
	_, ok := t.outstanding[m.ID.entry()]
	return ok
}

// Ack acknowledges a message: its entry once every message of a batch the broker delivered
// is (the batch's size is the broker's, never the id's claim). An id of an entry this
// consumer did not deliver is sent on when it names a whole entry (as Pulsar's clients send
// any id they are given: another session of the client may have received it), and ignored
// when it names one message of a batch, which cannot be told apart from a whole entry.
func (co *Consumer) Ack(id MessageID) {
	co.mu.Lock()
	defer co.mu.Unlock()
	pc := co.partOf(id.Partition)
	if co.closed || pc == nil {
		return
	}
	entry, batched := id.entry(), id.BatchIndex >= 0 && id.BatchSize > 1
	carried, ok := co.tracker.outstanding[entry]
	switch {
	case !ok && batched:
		return
	case ok && batched && carried != nil:
		if int(id.BatchSize) != len(carried) || int(id.BatchIndex) >= len(carried) {
			return
		}
		if !co.tracker.ackSlot(entry, carried, id.BatchIndex) {
			return
		}
	}
	ids := co.tracker.entries(entry)
	co.tracker.forget(entry)
	pc.ackAllLocked(ids, nil)
}

// ackSlot marks one message of a batch acknowledged; true once all it carried are (the
// slots it did not carry were acknowledged before, or compacted out).
func (t *tracker) ackSlot(entry MessageID, carried []bool, index int32) bool {
	slots := t.batches[entry]
	if slots == nil {
		slots = make([]bool, len(carried))
		for i, c := range carried {
			slots[i] = !c
		}
		t.batches[entry] = slots
	}
	slots[index] = true
	for _, done := range slots {
		if !done {
			return false
		}
	}
	return true
}

// forget drops an entry's state: it was acknowledged (or dead-lettered).
func (t *tracker) forget(entry MessageID) {
	if _, ok := t.outstanding[entry]; ok && t.full() {
		defer t.co.wake() // Receive waits for room
	}
	delete(t.outstanding, entry)
	delete(t.batches, entry)
	delete(t.unacked, entry)
	delete(t.nacks, entry)
	delete(t.dead, entry)
	delete(t.chunked, entry)
}

// Nack has a message's entry delivered again after the negative-ack delay; an entry this
// consumer did not deliver is not its to redeliver.
func (co *Consumer) Nack(id MessageID) {
	co.mu.Lock()
	defer co.mu.Unlock()
	entry := id.entry()
	if _, ok := co.tracker.outstanding[entry]; co.closed || !ok || co.partOf(id.Partition) == nil {
		return
	}
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
	co.expireChunksLocked(now)
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
			_, delivered := co.tracker.outstanding[e]
			go co.deadLetter(e, msgs, delivered)
			continue
		}
		if pc := co.partOf(e.Partition); pc != nil {
			for _, c := range co.tracker.entries(e) {
				byPart[pc] = append(byPart[pc], &pb.MessageIdData{LedgerId: proto.Uint64(c.Ledger), EntryId: proto.Uint64(c.Entry)})
			}
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
