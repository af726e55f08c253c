package session

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// FuzzMultiplexedNeighbours: whatever one client sends over a multiplexed session (valid
// commands, commands missing required fields or their sub-message or carrying several,
// commands on ids it never created, on ids the broker refused or has not answered yet,
// SENDs with broken payloads, arbitrary bytes), the broker connection it shares with a
// well-behaved neighbour is never closed because of it, and the neighbour's traffic keeps
// flowing. The broker (muxBroker) closes a connection where Pulsar does.
func FuzzMultiplexedNeighbours(f *testing.F) {
	r := rand.New(rand.NewPCG(11, 11))
	for range 32 {
		f.Add(genMuxStream(r))
	}
	b, target := newMuxBroker(f, 10)
	cfg, _ := muxConfig(f, 1<<20)
	addr, _ := startProxy(f, cfg, nil, oneTarget{target})
	f.Fuzz(func(t *testing.T, data []byte) {
		n := newNeighbour(t, addr, target)
		a := muxClient(t, addr, target)
		before := b.health() // both on the shared connection
		t.Cleanup(func() {
			if kills := b.killed(); t.Failed() && len(kills) > before.kills {
				t.Logf("the broker closed the shared connection: %q", kills[before.kills:])
			}
		})
		stream := append(muxStream(data), rawFrame(mustMarshal(lookupCmd("barrier", barrierRequest)))...)
		go a.c.Write(stream) // answers are read meanwhile; a closed session fails the write
		untilBarrier(t, a)
		a.c.Close()
		n.check(1)
		n.c.Close()
		sharedIntact(t, b, before)
	})
}

// barrierRequest is the request id of the LOOKUP behind a fuzzed stream: once the client has
// its answer, the broker has read everything the client sent before it (or the connection
// failed, which the test reports).
const barrierRequest = 1<<63 | 0xba771e7

// untilBarrier reads the client's answers until the barrier's, or until the proxy ends the
// session; the proxy must do one or the other.
func untilBarrier(t *testing.T, p *peer) {
	t.Helper()
	for {
		f, err := p.r.ReadFrame()
		if isTimeout(err) {
			t.Fatal("the proxy neither answered the barrier nor ended the session")
		}
		if err != nil {
			return
		}
		if cmd, err := frame.Decode(f.Command); err == nil {
			if id, ok := frame.RequestID(cmd); ok && id == barrierRequest { // its LOOKUP_RESPONSE, or ERROR
				return
			}
		}
	}
}

// muxStream turns fuzz input into a client's frames, one record at a time, each led by an
// op byte:
//
//	raw       n, then n bytes: a command as it is
//	template  what, id, how: a command of muxTemplates on a small id, spoiled as how says
//	payload   id, n, then n bytes: a SEND with those bytes as its payload (odd n: inside a
//	          checksum section, right or wrong as the first byte says)
//	generated 8 bytes: the seed of a command of the differential test's generator
func muxStream(data []byte) []byte {
	var out []byte
	for req := uint64(1); len(data) > 0; req++ {
		op := data[0] % 4
		data = data[1:]
		switch {
		case op == 0 && len(data) > 0:
			n := min(int(data[0]), len(data)-1)
			out = append(out, rawFrame(data[1:1+n])...)
			data = data[1+n:]
		case op == 1 && len(data) >= 3:
			out = append(out, rawFrame(spoiled(muxTemplate(data[0], uint64(data[1]%4), req), data[2]))...)
			data = data[3:]
		case op == 2 && len(data) >= 2:
			n := min(int(data[1]), len(data)-2)
			send := mustMarshal(&pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{
				ProducerId: proto.Uint64(uint64(data[0] % 4)), SequenceId: proto.Uint64(req)}})
			out = append(out, frameWithPayload(send, sendPayload(data[2:2+n]))...)
			data = data[2+n:]
		case op == 3 && len(data) >= 8:
			seed := binary.BigEndian.Uint64(data)
			out = append(out, rawFrame(genCommand(rand.New(rand.NewPCG(seed, seed))))...)
			data = data[8:]
		default:
			return out
		}
	}
	return out
}

// muxTemplate is a valid command of a client on a shared connection, on producer, consumer
// or watcher id: creations (their topic choosing whether the broker accepts, refuses or
// never answers them), the commands that use an id, closes, a lookup.
func muxTemplate(what byte, id, req uint64) *pb.BaseCommand {
	topic := []string{"t", "refused", "pending", "t"}[what>>4%4]
	mid := &pb.MessageIdData{LedgerId: proto.Uint64(1), EntryId: proto.Uint64(2)}
	u := proto.Uint64
	switch what % 16 {
	case 0:
		return producerCmd(topic, id, req)
	case 1:
		return subscribeCmd(topic, id, req)
	case 2:
		return &pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{ProducerId: u(id), SequenceId: u(req)}}
	case 3:
		return &pb.BaseCommand{Type: pb.BaseCommand_FLOW.Enum(), Flow: &pb.CommandFlow{ConsumerId: u(id), MessagePermits: proto.Uint32(uint32(what))}}
	case 4, 5:
		ack := &pb.CommandAck{ConsumerId: u(id), AckType: pb.CommandAck_Individual.Enum(), MessageId: []*pb.MessageIdData{mid}}
		if what%16 == 5 {
			ack.RequestId = u(req)
		}
		return &pb.BaseCommand{Type: pb.BaseCommand_ACK.Enum(), Ack: ack}
	case 6:
		return consumerStatsCmd(id, req)
	case 7:
		return &pb.BaseCommand{Type: pb.BaseCommand_SEEK.Enum(), Seek: &pb.CommandSeek{ConsumerId: u(id), RequestId: u(req), MessageId: mid}}
	case 8:
		return &pb.BaseCommand{Type: pb.BaseCommand_UNSUBSCRIBE.Enum(), Unsubscribe: &pb.CommandUnsubscribe{ConsumerId: u(id), RequestId: u(req)}}
	case 9:
		return &pb.BaseCommand{Type: pb.BaseCommand_GET_LAST_MESSAGE_ID.Enum(), GetLastMessageId: &pb.CommandGetLastMessageId{ConsumerId: u(id), RequestId: u(req)}}
	case 10:
		return &pb.BaseCommand{Type: pb.BaseCommand_REDELIVER_UNACKNOWLEDGED_MESSAGES.Enum(),
			RedeliverUnacknowledgedMessages: &pb.CommandRedeliverUnacknowledgedMessages{ConsumerId: u(id)}}
	case 11:
		return &pb.BaseCommand{Type: pb.BaseCommand_CLOSE_PRODUCER.Enum(), CloseProducer: &pb.CommandCloseProducer{ProducerId: u(id), RequestId: u(req)}}
	case 12:
		return &pb.BaseCommand{Type: pb.BaseCommand_CLOSE_CONSUMER.Enum(), CloseConsumer: &pb.CommandCloseConsumer{ConsumerId: u(id), RequestId: u(req)}}
	case 13:
		return &pb.BaseCommand{Type: pb.BaseCommand_WATCH_TOPIC_LIST.Enum(), WatchTopicList: &pb.CommandWatchTopicList{
			WatcherId: u(id), RequestId: u(req), Namespace: proto.String("public/default"), TopicsPattern: proto.String(".*")}}
	case 14:
		return &pb.BaseCommand{Type: pb.BaseCommand_WATCH_TOPIC_LIST_CLOSE.Enum(), WatchTopicListClose: &pb.CommandWatchTopicListClose{WatcherId: u(id), RequestId: u(req)}}
	}
	return lookupCmd(topic, req)
}

// spoiled encodes a command as it is (how%8 < 3), or spoiled: a field of its sub-message
// cleared (a required one, often), the sub-message left out, another command's sub-message
// beside it, or mangled as the differential test mangles.
func spoiled(cmd *pb.BaseCommand, how byte) []byte {
	r := rand.New(rand.NewPCG(uint64(how), 1))
	switch how % 8 {
	case 3:
		if sub, ok := subMessageOf(cmd); ok {
			var set []protoreflect.FieldDescriptor
			sub.Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool { set = append(set, fd); return true })
			if len(set) > 0 {
				sub.Clear(set[r.IntN(len(set))])
			}
		}
	case 4:
		cmd = &pb.BaseCommand{Type: cmd.Type}
	case 5:
		other := muxTemplate(how>>3, 1, 1)
		fd := other.ProtoReflect().Descriptor().Fields().ByNumber(protoreflect.FieldNumber(other.GetType()))
		if other.GetType() != cmd.GetType() {
			cmd.ProtoReflect().Set(fd, other.ProtoReflect().Get(fd))
		}
	}
	b, _ := proto.MarshalOptions{AllowPartial: true}.Marshal(cmd)
	if how%8 >= 6 {
		b = mangle(r, b, func() *string { return proto.String([]string{"t", "refused", "pending"}[r.IntN(3)]) })
	}
	return b
}

// sendPayload is a SEND's payload section around body: the bytes as they are (an even
// length), or a checksum section (0x0e01, CRC32C) whose checksum is right or not as body's
// first byte is even or odd.
func sendPayload(body []byte) []byte {
	if len(body)%2 == 0 {
		return body
	}
	sum := frame.Checksum(body)
	if body[0]%2 == 1 {
		sum++
	}
	return append(binary.BigEndian.AppendUint32([]byte{0x0e, 0x01}, sum), body...)
}

// frameWithPayload frames a command and its payload.
func frameWithPayload(command, payload []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(4+len(command)+len(payload)))
	b = binary.BigEndian.AppendUint32(b, uint32(len(command)))
	return append(append(b, command...), payload...)
}

// genMuxStream is a seed for muxStream: a client's session of creations (accepted, refused
// or never answered), uses and closes of the same few ids in random order, so that uses land
// on pending, refused and accepted ids; now and then a SEND with a broken payload, and, at
// most once and rather late, what ends a session (a spoiled, raw or generated command).
func genMuxStream(r *rand.Rand) []byte {
	var out []byte
	steps := 4 + r.IntN(24)
	spoilAt := r.IntN(2 * steps)
	for i := range steps {
		what := []byte{0, 1, 13, 2, 3, 4, 5, 6, 7, 8, 9, 10, 2, 3, 6, 11, 12, 14, 15, 0, 1}[r.IntN(21)]
		what |= byte(r.IntN(4)) << 4 // the creation's topic: accepted, refused, pending
		switch {
		case i == spoilAt && r.IntN(2) == 0:
			c := genCommand(r)
			c = c[:min(len(c), 255)]
			out = append(append(out, 0, byte(len(c))), c...)
		case i == spoilAt:
			out = append(out, 1, what, byte(r.IntN(4)), byte(3+r.IntN(5))) // spoiled
		case r.IntN(10) == 0:
			body := make([]byte, r.IntN(40))
			for j := range body {
				body[j] = byte(r.IntN(256))
			}
			out = append(append(out, 2, byte(r.IntN(4)), byte(len(body))), body...)
		default:
			out = append(out, 1, what, byte(r.IntN(4)), byte(r.IntN(3)))
		}
	}
	return out
}
