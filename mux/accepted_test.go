package mux

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// Commands of the tests below, with the client's own ids.

func producing(own, req uint64) *pb.BaseCommand {
	return &pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{
		Topic: proto.String("t"), ProducerId: u64(own), RequestId: u64(req)}}
}

func subscribing(own, req uint64) *pb.BaseCommand {
	return &pb.BaseCommand{Type: pb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pb.CommandSubscribe{Topic: proto.String("t"),
		Subscription: proto.String("s"), SubType: pb.CommandSubscribe_Shared.Enum(), ConsumerId: u64(own), RequestId: u64(req)}}
}

func watching(own, req uint64) *pb.BaseCommand {
	return &pb.BaseCommand{Type: pb.BaseCommand_WATCH_TOPIC_LIST.Enum(), WatchTopicList: &pb.CommandWatchTopicList{
		WatcherId: u64(own), RequestId: u64(req), Namespace: proto.String("public/default"), TopicsPattern: proto.String(".*")}}
}

func sending(own uint64) *pb.BaseCommand {
	return &pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{ProducerId: u64(own), SequenceId: u64(1)}}
}

func flowing(own uint64) *pb.BaseCommand {
	return &pb.BaseCommand{Type: pb.BaseCommand_FLOW.Enum(), Flow: &pb.CommandFlow{ConsumerId: u64(own), MessagePermits: proto.Uint32(10)}}
}

func consumerStats(own, req uint64) *pb.BaseCommand {
	return &pb.BaseCommand{Type: pb.BaseCommand_CONSUMER_STATS.Enum(), ConsumerStats: &pb.CommandConsumerStats{ConsumerId: u64(own), RequestId: u64(req)}}
}

// usesOfConsumer are the commands that use a consumer, with the client's id own.
func usesOfConsumer(own uint64) []*pb.BaseCommand {
	mid := &pb.MessageIdData{LedgerId: u64(1), EntryId: u64(2)}
	return []*pb.BaseCommand{
		flowing(own), consumerStats(own, 90),
		{Type: pb.BaseCommand_ACK.Enum(), Ack: &pb.CommandAck{ConsumerId: u64(own), AckType: pb.CommandAck_Individual.Enum(), MessageId: []*pb.MessageIdData{mid}}},
		{Type: pb.BaseCommand_ACK.Enum(), Ack: &pb.CommandAck{ConsumerId: u64(own), AckType: pb.CommandAck_Individual.Enum(), MessageId: []*pb.MessageIdData{mid}, RequestId: u64(91)}},
		{Type: pb.BaseCommand_REDELIVER_UNACKNOWLEDGED_MESSAGES.Enum(), RedeliverUnacknowledgedMessages: &pb.CommandRedeliverUnacknowledgedMessages{ConsumerId: u64(own)}},
		{Type: pb.BaseCommand_SEEK.Enum(), Seek: &pb.CommandSeek{ConsumerId: u64(own), RequestId: u64(92), MessageId: mid}},
		{Type: pb.BaseCommand_GET_LAST_MESSAGE_ID.Enum(), GetLastMessageId: &pb.CommandGetLastMessageId{ConsumerId: u64(own), RequestId: u64(93)}},
		{Type: pb.BaseCommand_UNSUBSCRIBE.Enum(), Unsubscribe: &pb.CommandUnsubscribe{ConsumerId: u64(own), RequestId: u64(94)}},
	}
}

// Broker answers, for the connection's request id.

func producerSuccess(ready bool) func(uint64) *pb.BaseCommand {
	return func(req uint64) *pb.BaseCommand {
		return &pb.BaseCommand{Type: pb.BaseCommand_PRODUCER_SUCCESS.Enum(), ProducerSuccess: &pb.CommandProducerSuccess{
			RequestId: u64(req), ProducerName: proto.String("p"), ProducerReady: proto.Bool(ready)}}
	}
}

func success(req uint64) *pb.BaseCommand {
	return &pb.BaseCommand{Type: pb.BaseCommand_SUCCESS.Enum(), Success: &pb.CommandSuccess{RequestId: u64(req)}}
}

func refusal(req uint64) *pb.BaseCommand {
	return frame.Error(req, pb.ServerError_ServiceNotReady, "no")
}

// mapping is one client on a mapping, driven the way a connection drives it.
type mapping struct {
	t *testing.T
	m *Mapper
	c *Client
}

func newMapping(t *testing.T) *mapping { return &mapping{t: t, m: NewMapper(), c: NewClient()} }

// up maps a command through both paths (bytes and decoded), which must agree; it returns the
// command as the broker gets it, or the error.
func (x *mapping) up(cmd *pb.BaseCommand) (*pb.BaseCommand, error) {
	x.t.Helper()
	raw, err := proto.Marshal(cmd)
	if err != nil {
		x.t.Fatal(err)
	}
	before := x.m.InUse()
	out, err := x.m.UpBytes(x.c, raw)
	if err != nil {
		if x.m.InUse() != before {
			x.t.Fatalf("%v refused (%v) but the mapping changed", cmd.GetType(), err)
		}
		decoded := proto.Clone(cmd).(*pb.BaseCommand)
		if derr := x.m.Up(x.c, decoded); !errors.Is(derr, ErrUnknownID) && !errors.Is(err, ErrUnknownID) {
			x.t.Fatalf("%v: the paths disagree: %v and %v", cmd.GetType(), err, derr)
		}
		return nil, err
	}
	got, derr := frame.Decode(out)
	if derr != nil {
		x.t.Fatal(derr)
	}
	return got, nil
}

// mustUp maps a command that must go to the broker.
func (x *mapping) mustUp(cmd *pb.BaseCommand) *pb.BaseCommand {
	x.t.Helper()
	out, err := x.up(cmd)
	if err != nil {
		x.t.Fatalf("%v not sent: %v", cmd.GetType(), err)
	}
	return out
}

// refused checks a command does not go to the broker (the mapping says ErrUnknownID).
func (x *mapping) refused(cmd *pb.BaseCommand) {
	x.t.Helper()
	if out, err := x.up(cmd); !errors.Is(err, ErrUnknownID) {
		x.t.Fatalf("%v reached the broker as %v (err %v)", cmd.GetType(), out, err)
	}
}

// answer gives the broker's answer for the connection's request id of sent (a creation) and
// returns what the client gets.
func (x *mapping) answer(sent *pb.BaseCommand, mk func(uint64) *pb.BaseCommand) *pb.BaseCommand {
	x.t.Helper()
	req, _ := frame.RequestID(sent)
	a := mk(req)
	raw, _ := proto.Marshal(a)
	out, owner, err := x.m.DownBytes(raw)
	if err != nil || owner != x.c {
		x.t.Fatalf("answer %v did not reach the client: %v", a.GetType(), err)
	}
	got, _ := frame.Decode(out)
	return got
}

// TestUsesWaitForTheBroker: a command that uses a producer or consumer reaches the broker
// only once the broker accepted its creation; while the creation is unanswered (or answered
// "not ready yet"), and after the broker refused it, it is refused as an unknown id, the way
// a broker would have to take it (a broker closes the whole connection on a SEND for a
// producer it has not made ready, and on CONSUMER_STATS for a consumer it refused).
func TestUsesWaitForTheBroker(t *testing.T) {
	for _, c := range []struct {
		name    string
		create  *pb.BaseCommand
		answers []func(uint64) *pb.BaseCommand
		uses    []*pb.BaseCommand
		sent    bool
	}{
		{"producer unanswered", producing(1, 10), nil, []*pb.BaseCommand{sending(1)}, false},
		{"producer not ready yet", producing(1, 10), []func(uint64) *pb.BaseCommand{producerSuccess(false)}, []*pb.BaseCommand{sending(1)}, false},
		{"producer refused", producing(1, 10), []func(uint64) *pb.BaseCommand{refusal}, []*pb.BaseCommand{sending(1)}, false},
		{"producer accepted", producing(1, 10), []func(uint64) *pb.BaseCommand{producerSuccess(true)}, []*pb.BaseCommand{sending(1)}, true},
		{"producer ready after waiting", producing(1, 10), []func(uint64) *pb.BaseCommand{producerSuccess(false), producerSuccess(true)}, []*pb.BaseCommand{sending(1)}, true},
		{"producer answered as a consumer", producing(1, 10), []func(uint64) *pb.BaseCommand{success}, []*pb.BaseCommand{sending(1)}, false},
		{"consumer unanswered", subscribing(3, 10), nil, usesOfConsumer(3), false},
		{"consumer refused", subscribing(3, 10), []func(uint64) *pb.BaseCommand{refusal}, usesOfConsumer(3), false},
		{"consumer accepted", subscribing(3, 10), []func(uint64) *pb.BaseCommand{success}, usesOfConsumer(3), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, use := range c.uses {
				x := newMapping(t)
				sent := x.mustUp(c.create)
				for _, a := range c.answers {
					x.answer(sent, a)
				}
				if c.sent {
					x.mustUp(use)
				} else {
					x.refused(use)
				}
			}
		})
	}
}

// TestBrokerCloseUnaccepts: after a broker's own CLOSE_PRODUCER or CLOSE_CONSUMER the broker
// no longer has the id (a SEND in flight then is one it may close the connection on), so
// uses wait for the client's new creation, which keeps the id, and its success.
func TestBrokerCloseUnaccepts(t *testing.T) {
	x := newMapping(t)
	p := x.mustUp(producing(1, 10))
	x.answer(p, producerSuccess(true))
	s := x.mustUp(subscribing(3, 11))
	x.answer(s, success)
	for _, cl := range []*pb.BaseCommand{
		{Type: pb.BaseCommand_CLOSE_PRODUCER.Enum(), CloseProducer: &pb.CommandCloseProducer{ProducerId: p.GetProducer().ProducerId, RequestId: u64(^uint64(0))}},
		{Type: pb.BaseCommand_CLOSE_CONSUMER.Enum(), CloseConsumer: &pb.CommandCloseConsumer{ConsumerId: s.GetSubscribe().ConsumerId, RequestId: u64(^uint64(0))}},
	} {
		raw, _ := proto.Marshal(cl)
		if _, owner, err := x.m.DownBytes(raw); err != nil || owner != x.c {
			t.Fatalf("the broker's %v did not reach the client: %v", cl.GetType(), err)
		}
	}
	x.refused(sending(1))
	x.refused(flowing(3))
	again := x.mustUp(producing(1, 12))
	if again.GetProducer().GetProducerId() != p.GetProducer().GetProducerId() {
		t.Fatalf("the recreation took a new id: %d, was %d", again.GetProducer().GetProducerId(), p.GetProducer().GetProducerId())
	}
	x.answer(again, producerSuccess(true))
	if got := x.mustUp(sending(1)).GetSend().GetProducerId(); got != p.GetProducer().GetProducerId() {
		t.Fatalf("SEND went to producer %d", got)
	}
	x.refused(flowing(3))
}

// TestRepeatedCreation: a client repeats a creation it got no answer to, under the same id;
// the repeat goes to the broker with the same connection id. A broker answers a repeat it
// gets while the first is under way with an ERROR ("already present"): the id stays
// pending until the first is answered. Once no creation of it is left unanswered and none
// succeeded, the id is forgotten, and a new creation under it gets a new connection id.
func TestRepeatedCreation(t *testing.T) {
	t.Run("repeat refused while the first goes on", func(t *testing.T) {
		x := newMapping(t)
		first := x.mustUp(producing(1, 10))
		repeat := x.mustUp(producing(1, 11))
		if repeat.GetProducer().GetProducerId() != first.GetProducer().GetProducerId() {
			t.Fatal("a repeated creation took a new id")
		}
		if got := x.answer(repeat, refusal); got.GetError().GetRequestId() != 11 {
			t.Fatalf("the client got %v", got)
		}
		x.refused(sending(1))
		x.answer(first, producerSuccess(true))
		x.mustUp(sending(1))
	})
	t.Run("both refused", func(t *testing.T) {
		x := newMapping(t)
		first := x.mustUp(subscribing(3, 10))
		repeat := x.mustUp(subscribing(3, 11))
		x.answer(first, refusal)
		x.refused(flowing(3))
		x.answer(repeat, refusal)
		x.refused(flowing(3))
		again := x.mustUp(subscribing(3, 12))
		if again.GetSubscribe().GetConsumerId() == first.GetSubscribe().GetConsumerId() {
			t.Fatal("a creation after the refusal kept the refused id")
		}
		x.answer(again, success)
		x.mustUp(flowing(3))
	})
	t.Run("first refused, the repeat made it", func(t *testing.T) {
		x := newMapping(t)
		first := x.mustUp(producing(1, 10))
		repeat := x.mustUp(producing(1, 11))
		x.answer(first, refusal)
		x.answer(repeat, producerSuccess(true))
		x.mustUp(sending(1))
	})
	t.Run("retry after a refusal", func(t *testing.T) {
		x := newMapping(t)
		first := x.mustUp(producing(1, 10))
		x.answer(first, refusal)
		x.refused(sending(1))
		again := x.mustUp(producing(1, 11))
		if again.GetProducer().GetProducerId() == first.GetProducer().GetProducerId() {
			t.Fatal("a creation after the refusal kept the refused id")
		}
		x.answer(again, producerSuccess(true))
		x.mustUp(sending(1))
	})
	t.Run("repeat of an accepted one refused", func(t *testing.T) {
		x := newMapping(t)
		first := x.mustUp(producing(1, 10))
		x.answer(first, producerSuccess(true))
		repeat := x.mustUp(producing(1, 11))
		x.answer(repeat, refusal) // the broker still has the producer
		x.mustUp(sending(1))
	})
}

// TestClosePendingGoesToBroker: closing an id whose creation is unanswered reaches the
// broker (which cancels the creation so) and forgets the id; a late answer to the creation
// still reaches the client by its request id, and does not bring the id back.
func TestClosePendingGoesToBroker(t *testing.T) {
	for _, c := range []struct {
		create, close *pb.BaseCommand
		ok            func(uint64) *pb.BaseCommand
		use           *pb.BaseCommand
	}{
		{producing(1, 10), &pb.BaseCommand{Type: pb.BaseCommand_CLOSE_PRODUCER.Enum(), CloseProducer: &pb.CommandCloseProducer{ProducerId: u64(1), RequestId: u64(11)}},
			producerSuccess(true), sending(1)},
		{subscribing(3, 10), &pb.BaseCommand{Type: pb.BaseCommand_CLOSE_CONSUMER.Enum(), CloseConsumer: &pb.CommandCloseConsumer{ConsumerId: u64(3), RequestId: u64(11)}},
			success, flowing(3)},
		// A watcher's success names the watcher, which is gone: it reaches nobody.
		{watching(5, 10), &pb.BaseCommand{Type: pb.BaseCommand_WATCH_TOPIC_LIST_CLOSE.Enum(), WatchTopicListClose: &pb.CommandWatchTopicListClose{WatcherId: u64(5), RequestId: u64(11)}},
			nil, nil},
	} {
		t.Run(c.create.GetType().String(), func(t *testing.T) {
			x := newMapping(t)
			created := x.mustUp(c.create)
			closed := x.mustUp(c.close)
			if ownField(closed) != ownField(created) {
				t.Fatalf("the close names %d, the creation %d", ownField(closed), ownField(created))
			}
			x.refused(c.close) // once is enough: the id is gone
			if c.ok == nil {
				return
			}
			if got := x.answer(created, c.ok); func() uint64 { id, _ := frame.RequestID(got); return id }() != 10 {
				t.Fatalf("the late answer reached the client as %v", got)
			}
			x.refused(c.use)
			if x.m.InUse() != 1 || len(x.m.pending) != 0 || len(x.m.creating) != 0 { // the close's request, still unanswered
				t.Fatalf("%d ids mapped, %d pending, %d creations", x.m.InUse(), len(x.m.pending), len(x.m.creating))
			}
		})
	}
}

// ownField is the producer, consumer or watcher id of a creation or close.
func ownField(cmd *pb.BaseCommand) uint64 {
	switch {
	case cmd.GetProducer() != nil:
		return cmd.GetProducer().GetProducerId()
	case cmd.GetCloseProducer() != nil:
		return cmd.GetCloseProducer().GetProducerId()
	case cmd.GetSubscribe() != nil:
		return cmd.GetSubscribe().GetConsumerId()
	case cmd.GetCloseConsumer() != nil:
		return cmd.GetCloseConsumer().GetConsumerId()
	case cmd.GetWatchTopicList() != nil:
		return cmd.GetWatchTopicList().GetWatcherId()
	}
	return cmd.GetWatchTopicListClose().GetWatcherId()
}

// TestDetachReportsPending: a client that leaves (or whose connection breaks) with a
// creation unanswered has it in what it held, with the creation's request, so the proxy
// closes it on the broker or answers it at the client; nothing of it stays behind.
func TestDetachReportsPending(t *testing.T) {
	x := newMapping(t)
	p := x.mustUp(producing(1, 10))
	s := x.mustUp(subscribing(3, 11))
	x.answer(s, success)
	x.mustUp(watching(5, 12))
	held := x.m.Detach(x.c)
	if held.Producers[1] != p.GetProducer().GetProducerId() || held.Consumers[3] != s.GetSubscribe().GetConsumerId() || len(held.Watchers) != 1 {
		t.Fatalf("held %+v", held)
	}
	if len(held.Requests) != 2 { // the producer's and the watcher's creations
		t.Fatalf("held requests %v", held.Requests)
	}
	x.m.assertEmpty(t)
}

func (m *Mapper) assertEmpty(t *testing.T) {
	t.Helper()
	if n := m.InUse(); n != 0 || len(m.pending) != 0 || len(m.creating) != 0 {
		t.Fatalf("%d ids, %d pending, %d creations still mapped", n, len(m.pending), len(m.creating))
	}
}

// TestNotFound: a command refused for an id the client does not have (or the broker has not
// accepted) gets what a broker answers for an id it lacks, for the client's request id.
func TestNotFound(t *testing.T) {
	closeProducer := &pb.BaseCommand{Type: pb.BaseCommand_CLOSE_PRODUCER.Enum(), CloseProducer: &pb.CommandCloseProducer{ProducerId: u64(1), RequestId: u64(7)}}
	closeWatcher := &pb.BaseCommand{Type: pb.BaseCommand_WATCH_TOPIC_LIST_CLOSE.Enum(), WatchTopicListClose: &pb.CommandWatchTopicListClose{WatcherId: u64(1), RequestId: u64(7)}}
	uses := usesOfConsumer(3)
	for _, c := range []struct {
		cmd  *pb.BaseCommand
		want pb.BaseCommand_Type // 0: nothing
		code pb.ServerError
	}{
		{sending(1), 0, 0},
		{closeProducer, pb.BaseCommand_SUCCESS, 0},
		{closeWatcher, pb.BaseCommand_SUCCESS, 0},
		{uses[0], 0, 0}, // FLOW
		{uses[1], pb.BaseCommand_CONSUMER_STATS_RESPONSE, pb.ServerError_ConsumerNotFound},
		{uses[2], 0, 0}, // ACK
		{uses[3], pb.BaseCommand_ERROR, pb.ServerError_MetadataError}, // ACK with a request id
		{uses[4], 0, 0}, // REDELIVER_UNACKNOWLEDGED_MESSAGES
		{uses[5], pb.BaseCommand_ERROR, pb.ServerError_MetadataError}, // SEEK
		{uses[6], pb.BaseCommand_ERROR, pb.ServerError_MetadataError}, // GET_LAST_MESSAGE_ID
		{uses[7], pb.BaseCommand_ERROR, pb.ServerError_MetadataError}, // UNSUBSCRIBE
	} {
		got := NotFound(c.cmd, "why")
		if c.want == 0 {
			if got != nil {
				t.Errorf("%v answered %v", c.cmd.GetType(), got)
			}
			continue
		}
		want, _ := frame.RequestID(c.cmd)
		id, _ := frame.RequestID(got)
		code := got.GetError().GetError()
		if r := got.GetConsumerStatsResponse(); r != nil {
			code = r.GetErrorCode()
		}
		if got.GetType() != c.want || id != want || code != c.code {
			t.Errorf("%v answered %v, want %v %v for request %d", c.cmd.GetType(), got, c.want, c.code, want)
		}
		if _, err := proto.Marshal(got); err != nil {
			t.Errorf("%v: the answer does not encode: %v", c.cmd.GetType(), err)
		}
	}
}
