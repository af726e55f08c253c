package mux

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// model is what the test expects of a mapping: for each client, its live producers,
// consumers and watchers (each accepted by the broker or not yet), and the requests waiting
// for an answer on the broker side.
type model struct {
	m        *Mapper
	clients  []*modelClient
	pending  []pendingReq // requests as the broker saw them, answered in random order
	rng      *rand.Rand
	t        *testing.T
	seenLive map[[2]uint64]bool // (kind, broker id) of live entities: never two owners
}

type modelClient struct {
	c                              *Client
	producers, consumers, watchers map[uint64]uint64 // client id → broker id as the broker saw it
	// waiting: the ids (by kind and broker id) the broker has not accepted, with how many of
	// their creations it has still to answer since it last had none.
	waiting map[[2]uint64]int
	nextReq uint64
	gone    bool
}

type pendingReq struct {
	client   *modelClient
	own      uint64 // the client's request id
	brokerID uint64
	typ      pb.BaseCommand_Type
	creates  [2]uint64 // a creation's kind and broker id
}

func newModel(t *testing.T, seed uint64, clients int) *model {
	md := &model{m: NewMapper(), rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), t: t, seenLive: map[[2]uint64]bool{}}
	for range clients {
		md.clients = append(md.clients, &modelClient{c: NewClient(), producers: map[uint64]uint64{}, consumers: map[uint64]uint64{},
			watchers: map[uint64]uint64{}, waiting: map[[2]uint64]int{}})
	}
	return md
}

func u64(v uint64) *uint64 { return &v }

// up maps a client's command and returns it as the broker sees it.
func (md *model) up(mc *modelClient, cmd *pb.BaseCommand) *pb.BaseCommand {
	md.t.Helper()
	if md.rng.IntN(2) == 0 { // the bytes path (the proxy's), or the decoded one
		raw, err := proto.Marshal(cmd)
		if err != nil {
			md.t.Fatal(err)
		}
		mapped, err := md.m.UpBytes(mc.c, raw)
		if err != nil {
			md.t.Fatalf("up bytes %v: %v", cmd.GetType(), err)
		}
		out, err := frame.Decode(mapped)
		if err != nil {
			md.t.Fatalf("up bytes %v: the result does not decode: %v", cmd.GetType(), err)
		}
		return out
	}
	out := proto.Clone(cmd).(*pb.BaseCommand)
	if err := md.m.Up(mc.c, out); err != nil {
		md.t.Fatalf("up %v: %v", cmd.GetType(), err)
	}
	return out
}

// down maps a broker's command and checks it reaches want exactly as wantCmd.
func (md *model) down(brokerCmd *pb.BaseCommand, want *modelClient, wantCmd *pb.BaseCommand) {
	md.t.Helper()
	var got *Client
	var err error
	if md.rng.IntN(2) == 0 {
		raw, merr := proto.Marshal(brokerCmd)
		if merr != nil {
			md.t.Fatal(merr)
		}
		var mapped []byte
		if mapped, got, err = md.m.DownBytes(raw); err == nil {
			var derr error
			if brokerCmd, derr = frame.Decode(mapped); derr != nil {
				md.t.Fatalf("down bytes %v: the result does not decode: %v", wantCmd.GetType(), derr)
			}
		}
	} else {
		got, err = md.m.Down(brokerCmd)
	}
	if err != nil {
		md.t.Fatalf("down %v: %v", brokerCmd.GetType(), err)
	}
	if got != want.c {
		md.t.Fatalf("down %v: reached another client", brokerCmd.GetType())
	}
	if !proto.Equal(brokerCmd, wantCmd) {
		md.t.Fatalf("down %v: got %v, want %v", brokerCmd.GetType(), brokerCmd, wantCmd)
	}
}

func (md *model) pick() *modelClient {
	for range 8 {
		if mc := md.clients[md.rng.IntN(len(md.clients))]; !mc.gone {
			return mc
		}
	}
	return nil
}

// anyID picks a small id, so clients often choose the same ids as each other.
func (md *model) anyID() uint64 { return uint64(md.rng.IntN(4)) }

func pickKey(rng *rand.Rand, ids map[uint64]uint64) (uint64, bool) {
	if len(ids) == 0 {
		return 0, false
	}
	n := rng.IntN(len(ids))
	for k := range ids {
		if n == 0 {
			return k, true
		}
		n--
	}
	return 0, false
}

func (md *model) request(mc *modelClient, cmd *pb.BaseCommand, setOwn func(*pb.BaseCommand, uint64)) *pb.BaseCommand {
	mc.nextReq++
	if md.rng.IntN(4) == 0 {
		mc.nextReq = md.rng.Uint64() // clients may use any 64-bit request id
	}
	setOwn(cmd, mc.nextReq)
	out := md.up(mc, cmd)
	id, _ := requestIDOf(out)
	md.pending = append(md.pending, pendingReq{client: mc, own: mc.nextReq, brokerID: id, typ: cmd.GetType()})
	return out
}

// refusedUp checks a client's command is not sent (it uses an id the broker has not
// accepted) and changes nothing.
func (md *model) refusedUp(mc *modelClient, cmd *pb.BaseCommand) {
	md.t.Helper()
	before := md.m.InUse()
	raw, _ := proto.Marshal(cmd)
	if out, err := md.m.UpBytes(mc.c, raw); !errors.Is(err, ErrUnknownID) {
		md.t.Fatalf("%v on a pending id: sent as %x (err %v)", cmd.GetType(), out, err)
	}
	if err := md.m.Up(mc.c, proto.Clone(cmd).(*pb.BaseCommand)); !errors.Is(err, ErrUnknownID) {
		md.t.Fatalf("%v on a pending id, decoded: err %v", cmd.GetType(), err)
	}
	if md.m.InUse() != before {
		md.t.Fatalf("a refused %v changed the mapping", cmd.GetType())
	}
}

// creation notes the last request as the creation of (k, brokerID): one more answer to wait
// for if the id is not accepted.
func (md *model) creation(mc *modelClient, k kind, brokerID uint64) {
	key := [2]uint64{uint64(k), brokerID}
	md.pending[len(md.pending)-1].creates = key
	if n, waiting := mc.waiting[key]; waiting {
		mc.waiting[key] = n + 1
	}
}

func (mc *modelClient) accepted(k kind, brokerID uint64) bool {
	_, waiting := mc.waiting[[2]uint64{uint64(k), brokerID}]
	return !waiting
}

func requestIDOf(cmd *pb.BaseCommand) (uint64, bool) {
	sub, err := subMessage(cmd)
	if err != nil {
		return 0, false
	}
	fd := sub.Descriptor().Fields().ByName("request_id")
	if fd == nil || !sub.Has(fd) {
		return 0, false
	}
	return sub.Get(fd).Uint(), true
}

func (md *model) step() {
	mc := md.pick()
	if mc == nil {
		return
	}
	switch md.rng.IntN(12) {
	case 0: // create a producer (or repeat the creation)
		own := md.anyID()
		out := md.request(mc, &pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{ProducerId: u64(own), Topic: proto.String("t")}},
			func(c *pb.BaseCommand, id uint64) { c.Producer.RequestId = u64(id) })
		md.created(mc, mc.producers, own, out.GetProducer().GetProducerId(), producerID)
	case 1: // subscribe
		own := md.anyID()
		out := md.request(mc, &pb.BaseCommand{Type: pb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pb.CommandSubscribe{ConsumerId: u64(own), Topic: proto.String("t"), Subscription: proto.String("s"), SubType: pb.CommandSubscribe_Shared.Enum()}},
			func(c *pb.BaseCommand, id uint64) { c.Subscribe.RequestId = u64(id) })
		md.created(mc, mc.consumers, own, out.GetSubscribe().GetConsumerId(), consumerID)
	case 2: // send, and its receipt
		if own, ok := pickKey(md.rng, mc.producers); ok {
			seq := md.rng.Uint64()
			send := &pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{ProducerId: u64(own), SequenceId: u64(seq)}}
			if !mc.accepted(producerID, mc.producers[own]) {
				md.refusedUp(mc, send)
				return
			}
			out := md.up(mc, send)
			md.expect(out.GetSend().GetProducerId(), mc.producers[own])
			receipt := func(id uint64) *pb.BaseCommand {
				return &pb.BaseCommand{Type: pb.BaseCommand_SEND_RECEIPT.Enum(), SendReceipt: &pb.CommandSendReceipt{ProducerId: u64(id), SequenceId: u64(seq)}}
			}
			md.down(receipt(mc.producers[own]), mc, receipt(own))
		}
	case 3: // flow, and messages (and a broker's notices) for the consumer
		if own, ok := pickKey(md.rng, mc.consumers); ok {
			flow := &pb.BaseCommand{Type: pb.BaseCommand_FLOW.Enum(), Flow: &pb.CommandFlow{ConsumerId: u64(own), MessagePermits: proto.Uint32(10)}}
			if !mc.accepted(consumerID, mc.consumers[own]) {
				md.refusedUp(mc, flow)
				return
			}
			out := md.up(mc, flow)
			b := mc.consumers[own]
			md.expect(out.GetFlow().GetConsumerId(), b)
			msg := func(id uint64) *pb.BaseCommand {
				return &pb.BaseCommand{Type: pb.BaseCommand_MESSAGE.Enum(), Message: &pb.CommandMessage{ConsumerId: u64(id), MessageId: &pb.MessageIdData{LedgerId: u64(1), EntryId: u64(2)}}}
			}
			md.down(msg(b), mc, msg(own))
			change := func(id uint64) *pb.BaseCommand {
				return &pb.BaseCommand{Type: pb.BaseCommand_ACTIVE_CONSUMER_CHANGE.Enum(), ActiveConsumerChange: &pb.CommandActiveConsumerChange{ConsumerId: u64(id), IsActive: proto.Bool(true)}}
			}
			md.down(change(b), mc, change(own))
		}
	case 4: // the client closes a producer; later frames for it reach nobody
		if own, ok := pickKey(md.rng, mc.producers); ok {
			b := mc.producers[own]
			md.request(mc, &pb.BaseCommand{Type: pb.BaseCommand_CLOSE_PRODUCER.Enum(), CloseProducer: &pb.CommandCloseProducer{ProducerId: u64(own)}},
				func(c *pb.BaseCommand, id uint64) { c.CloseProducer.RequestId = u64(id) })
			delete(mc.producers, own)
			delete(mc.waiting, [2]uint64{uint64(producerID), b})
			delete(md.seenLive, [2]uint64{uint64(producerID), b})
			md.gone(&pb.BaseCommand{Type: pb.BaseCommand_SEND_RECEIPT.Enum(), SendReceipt: &pb.CommandSendReceipt{ProducerId: u64(b), SequenceId: u64(1)}})
		}
	case 5: // the client closes a consumer
		if own, ok := pickKey(md.rng, mc.consumers); ok {
			b := mc.consumers[own]
			md.request(mc, &pb.BaseCommand{Type: pb.BaseCommand_CLOSE_CONSUMER.Enum(), CloseConsumer: &pb.CommandCloseConsumer{ConsumerId: u64(own)}},
				func(c *pb.BaseCommand, id uint64) { c.CloseConsumer.RequestId = u64(id) })
			delete(mc.consumers, own)
			delete(mc.waiting, [2]uint64{uint64(consumerID), b})
			delete(md.seenLive, [2]uint64{uint64(consumerID), b})
			md.gone(&pb.BaseCommand{Type: pb.BaseCommand_MESSAGE.Enum(), Message: &pb.CommandMessage{ConsumerId: u64(b), MessageId: &pb.MessageIdData{LedgerId: u64(1), EntryId: u64(2)}}})
		}
	case 6: // broker-initiated: close a producer, or migrate a consumer's topic
		if own, ok := pickKey(md.rng, mc.producers); ok {
			cl := func(id uint64) *pb.BaseCommand {
				return &pb.BaseCommand{Type: pb.BaseCommand_CLOSE_PRODUCER.Enum(), CloseProducer: &pb.CommandCloseProducer{ProducerId: u64(id), RequestId: u64(^uint64(0))}}
			}
			md.down(cl(mc.producers[own]), mc, cl(own))
			mc.waiting[[2]uint64{uint64(producerID), mc.producers[own]}] = 0 // the broker no longer has it
		}
		if own, ok := pickKey(md.rng, mc.consumers); ok {
			mig := func(id uint64) *pb.BaseCommand {
				return &pb.BaseCommand{Type: pb.BaseCommand_TOPIC_MIGRATED.Enum(), TopicMigrated: &pb.CommandTopicMigrated{ResourceId: u64(id), ResourceType: pb.CommandTopicMigrated_Consumer.Enum()}}
			}
			md.down(mig(mc.consumers[own]), mc, mig(own))
		}
	case 7: // a topic-list watcher and an update
		own := md.anyID()
		out := md.request(mc, &pb.BaseCommand{Type: pb.BaseCommand_WATCH_TOPIC_LIST.Enum(), WatchTopicList: &pb.CommandWatchTopicList{WatcherId: u64(own), Namespace: proto.String("public/default"), TopicsPattern: proto.String(".*")}},
			func(c *pb.BaseCommand, id uint64) { c.WatchTopicList.RequestId = u64(id) })
		md.created(mc, mc.watchers, own, out.GetWatchTopicList().GetWatcherId(), watcherID)
		upd := func(id uint64) *pb.BaseCommand {
			return &pb.BaseCommand{Type: pb.BaseCommand_WATCH_TOPIC_UPDATE.Enum(), WatchTopicUpdate: &pb.CommandWatchTopicUpdate{WatcherId: u64(id), TopicsHash: proto.String("h")}}
		}
		md.down(upd(mc.watchers[own]), mc, upd(own))
	case 8: // a lookup, a plain request
		md.request(mc, &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{Topic: proto.String("t")}},
			func(c *pb.BaseCommand, id uint64) { c.LookupTopic.RequestId = u64(id) })
	case 9, 10: // the broker answers a pending request
		md.answer()
	case 11: // the client leaves: nothing of it is reachable any more
		if md.rng.IntN(4) == 0 {
			md.leave(mc)
		}
	}
}

// created checks a creation: a repeated one keeps its broker id, a new one gets an id no
// live entity of that kind has, and waits for the broker.
func (md *model) created(mc *modelClient, ids map[uint64]uint64, own, brokerID uint64, k kind) {
	md.t.Helper()
	if prev, ok := ids[own]; ok {
		md.expect(brokerID, prev)
		md.creation(mc, k, brokerID)
		return
	}
	key := [2]uint64{uint64(k), brokerID}
	if md.seenLive[key] {
		md.t.Fatalf("%v id %d given twice", k, brokerID)
	}
	md.seenLive[key] = true
	ids[own] = brokerID
	mc.waiting[key] = 0
	md.creation(mc, k, brokerID)
}

func (md *model) expect(got, want uint64) {
	md.t.Helper()
	if got != want {
		md.t.Fatalf("broker id %d, want %d", got, want)
	}
}

func (md *model) gone(brokerCmd *pb.BaseCommand) {
	md.t.Helper()
	raw, _ := proto.Marshal(brokerCmd)
	if _, c, err := md.m.DownBytes(raw); !errors.Is(err, ErrUnknownID) {
		md.t.Fatalf("%v for a closed id reached %p (err %v)", brokerCmd.GetType(), c, err)
	}
	if c, err := md.m.Down(brokerCmd); !errors.Is(err, ErrUnknownID) {
		md.t.Fatalf("%v for a closed id reached %p (err %v)", brokerCmd.GetType(), c, err)
	}
}

func (md *model) answer() {
	if len(md.pending) == 0 {
		return
	}
	i := md.rng.IntN(len(md.pending))
	p := md.pending[i]
	md.pending = append(md.pending[:i], md.pending[i+1:]...)
	creation := p.typ == pb.BaseCommand_PRODUCER || p.typ == pb.BaseCommand_SUBSCRIBE || p.typ == pb.BaseCommand_WATCH_TOPIC_LIST
	refused := creation && md.rng.IntN(3) == 0
	mk := md.answerTo(p, refused)
	brokers := mk(p.brokerID, p.creates[1])
	if p.client.gone {
		md.gone(brokers)
		return
	}
	own, _ := ownOf(p.client.watchers, p.creates[1]) // a watcher's success names it
	md.down(brokers, p.client, mk(p.own, own))
	if moreAnswers(brokers) {
		md.pending = append(md.pending, p) // a second answer follows
		return
	}
	md.gone(mk(p.brokerID, p.creates[1])) // answered: a second answer reaches nobody
	if creation {
		md.settled(p, !refused)
	}
}

// answerTo is the broker's answer to a request, for a request id (and a watcher id, which a
// watcher's success names): an ERROR when refused, a not-ready PRODUCER_SUCCESS now and then.
func (md *model) answerTo(p pendingReq, refused bool) func(id, watcher uint64) *pb.BaseCommand {
	switch {
	case refused:
		return func(id, _ uint64) *pb.BaseCommand {
			return &pb.BaseCommand{Type: pb.BaseCommand_ERROR.Enum(), Error: &pb.CommandError{RequestId: u64(id), Error: pb.ServerError_UnknownError.Enum(), Message: proto.String("x")}}
		}
	case p.typ == pb.BaseCommand_PRODUCER:
		ready := md.rng.IntN(3) != 0
		return func(id, _ uint64) *pb.BaseCommand {
			return &pb.BaseCommand{Type: pb.BaseCommand_PRODUCER_SUCCESS.Enum(), ProducerSuccess: &pb.CommandProducerSuccess{RequestId: u64(id), ProducerName: proto.String("p"), ProducerReady: proto.Bool(ready)}}
		}
	case p.typ == pb.BaseCommand_LOOKUP:
		return func(id, _ uint64) *pb.BaseCommand {
			return &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP_RESPONSE.Enum(), LookupTopicResponse: &pb.CommandLookupTopicResponse{RequestId: u64(id)}}
		}
	case p.typ == pb.BaseCommand_WATCH_TOPIC_LIST:
		return func(id, watcher uint64) *pb.BaseCommand {
			return &pb.BaseCommand{Type: pb.BaseCommand_WATCH_TOPIC_LIST_SUCCESS.Enum(), WatchTopicListSuccess: &pb.CommandWatchTopicListSuccess{
				RequestId: u64(id), WatcherId: u64(watcher), TopicsHash: proto.String("h")}}
		}
	}
	return func(id, _ uint64) *pb.BaseCommand {
		return &pb.BaseCommand{Type: pb.BaseCommand_SUCCESS.Enum(), Success: &pb.CommandSuccess{RequestId: u64(id)}}
	}
}

// settled takes the broker's final answer to a creation: success accepts the id, a refusal
// forgets it once none of its creations is left to answer. An id the client closed since,
// or one accepted before, stays as it is.
func (md *model) settled(p pendingReq, ok bool) {
	mc := p.client
	n, waiting := mc.waiting[p.creates]
	if !waiting {
		return
	}
	ids := map[kind]map[uint64]uint64{producerID: mc.producers, consumerID: mc.consumers, watcherID: mc.watchers}[kind(p.creates[0])]
	own, _ := ownOf(ids, p.creates[1])
	switch {
	case ok:
		delete(mc.waiting, p.creates)
	case n > 1:
		mc.waiting[p.creates] = n - 1
	default:
		delete(ids, own)
		delete(mc.waiting, p.creates)
		delete(md.seenLive, p.creates)
		b := u64(p.creates[1])
		md.gone(map[kind]*pb.BaseCommand{
			producerID: {Type: pb.BaseCommand_SEND_RECEIPT.Enum(), SendReceipt: &pb.CommandSendReceipt{ProducerId: b, SequenceId: u64(1)}},
			consumerID: {Type: pb.BaseCommand_MESSAGE.Enum(), Message: &pb.CommandMessage{ConsumerId: b, MessageId: &pb.MessageIdData{LedgerId: u64(1), EntryId: u64(2)}}},
			watcherID:  {Type: pb.BaseCommand_WATCH_TOPIC_UPDATE.Enum(), WatchTopicUpdate: &pb.CommandWatchTopicUpdate{WatcherId: b, TopicsHash: proto.String("h")}},
		}[kind(p.creates[0])])
	}
}

// ownOf is the client's id of broker id b.
func ownOf(ids map[uint64]uint64, b uint64) (uint64, bool) {
	for own, v := range ids {
		if v == b {
			return own, true
		}
	}
	return 0, false
}

func (md *model) leave(mc *modelClient) {
	held := md.m.Detach(mc.c)
	if len(held.Producers) != len(mc.producers) || len(held.Consumers) != len(mc.consumers) || len(held.Watchers) != len(mc.watchers) {
		md.t.Fatalf("detach returned %d/%d/%d, client held %d/%d/%d", len(held.Producers), len(held.Consumers), len(held.Watchers), len(mc.producers), len(mc.consumers), len(mc.watchers))
	}
	for own, b := range mc.producers {
		md.expect(held.Producers[own], b)
		md.gone(&pb.BaseCommand{Type: pb.BaseCommand_CLOSE_PRODUCER.Enum(), CloseProducer: &pb.CommandCloseProducer{ProducerId: u64(b), RequestId: u64(1)}})
	}
	for own, b := range mc.consumers {
		md.expect(held.Consumers[own], b)
		md.gone(&pb.BaseCommand{Type: pb.BaseCommand_REACHED_END_OF_TOPIC.Enum(), ReachedEndOfTopic: &pb.CommandReachedEndOfTopic{ConsumerId: u64(b)}})
	}
	mc.gone = true
}

func runModel(t *testing.T, seed uint64, clients, steps int) {
	md := newModel(t, seed, clients)
	for range steps {
		md.step()
	}
	for len(md.pending) > 0 {
		md.answer()
	}
	for _, mc := range md.clients {
		if !mc.gone {
			md.leave(mc)
		}
	}
	if n := md.m.InUse(); n != 0 || len(md.m.pending) != 0 || len(md.m.creating) != 0 {
		t.Fatalf("%d ids, %d pending, %d creations still mapped after every client left", n, len(md.m.pending), len(md.m.creating))
	}
}

// TestMappingRoundTrip: random interleavings of many clients' commands and the broker's
// answers and notices, in random order, map back to exactly the client and the ids it used.
func TestMappingRoundTrip(t *testing.T) {
	for seed := range uint64(100) {
		runModel(t, seed, 2+int(seed%30), 1500)
	}
}

func FuzzMappingRoundTrip(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{0xff, 0, 0xff, 0, 0xff, 0, 0xff, 0, 50})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < 9 {
			return
		}
		runModel(t, binary.BigEndian.Uint64(b), 1+int(b[8]%64), 500)
	})
}

// TestUpRefusesUnknown: a client cannot name another client's ids, nor send what has no
// place on a shared connection.
func TestUpRefusesUnknown(t *testing.T) {
	m := NewMapper()
	a, b := NewClient(), NewClient()
	prod := &pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{ProducerId: u64(7), RequestId: u64(1), Topic: proto.String("t")}}
	if err := m.Up(a, prod); err != nil {
		t.Fatal(err)
	}
	send := &pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{ProducerId: u64(7), SequenceId: u64(1)}}
	if err := m.Up(b, send); !errors.Is(err, ErrUnknownID) {
		t.Fatalf("b sent on a's producer: %v", err)
	}
	for _, typ := range []pb.BaseCommand_Type{pb.BaseCommand_CONNECT, pb.BaseCommand_SUCCESS, pb.BaseCommand_END_TXN_ON_PARTITION, pb.BaseCommand_MESSAGE, 99} {
		if err := m.Up(b, &pb.BaseCommand{Type: typ.Enum()}); !errors.Is(err, ErrNotAllowed) {
			t.Errorf("%v from a client: %v", typ, err)
		}
	}
	before := m.InUse()
	if err := m.Up(b, &pb.BaseCommand{Type: pb.BaseCommand_CLOSE_PRODUCER.Enum(), CloseProducer: &pb.CommandCloseProducer{ProducerId: u64(7), RequestId: u64(2)}}); !errors.Is(err, ErrUnknownID) {
		t.Fatalf("b closed a's producer: %v", err)
	}
	if m.InUse() != before {
		t.Fatal("a refused command took a request id")
	}
}
