package session

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"slices"
	"sync"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/brokers"
	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// Hostile review (attack-review branch): tests that fail on the code as reviewed.

// wideTypeTag is the tag of BaseCommand.type (field 1, varint) written as a 5-byte varint
// whose value is 1<<32|8. Go's protowire reads it as field number 2^29+1 (ConsumeTag checks
// only the lower bound, DecodeTag only that the number fits an int32), an unknown field the
// type peek skips; a broker's LightProto reads tags as 32-bit varints (the fifth byte's high
// bits fall off) and sees field 1: the command's type.
func wideTypeTag() []byte {
	return protowire.AppendVarint(nil, 1<<32|1<<3|uint64(protowire.VarintType))
}

// smuggledProducer is a frame the proxy peeks as SEND (the direct session's hot path,
// forwarded undecoded) and a broker reads as a PRODUCER on topic.
func smuggledProducer(t *testing.T, topic string) []byte {
	t.Helper()
	prod, err := proto.Marshal(producerOn(topic, 7).Producer)
	if err != nil {
		t.Fatal(err)
	}
	send, err := proto.Marshal(&pb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(1)})
	if err != nil {
		t.Fatal(err)
	}
	cmd := protowire.AppendTag(nil, 1, protowire.VarintType)
	cmd = protowire.AppendVarint(cmd, uint64(pb.BaseCommand_SEND)) // what the proxy peeks
	cmd = protowire.AppendBytes(protowire.AppendTag(cmd, 6, protowire.BytesType), send)
	cmd = protowire.AppendVarint(append(cmd, wideTypeTag()...), uint64(pb.BaseCommand_PRODUCER)) // what the broker reads last
	cmd = protowire.AppendBytes(protowire.AppendTag(cmd, 5, protowire.BytesType), prod)
	return cmd
}

// TestReviewWideTypeTagSmugglesProducer: an attacker with a token for one topic (alice may
// produce only on acme/ns/allowed) opens a direct session and sends a frame whose type the
// proxy peeks as SEND but a broker reads as PRODUCER on any topic: the edge never sees it
// (SEND is the hot path), so the attacker produces (or, with SUBSCRIBE, consumes) on topics
// the proxy's policy forbids, wherever the broker's own grants are wider than the proxy's
// (the very case the policy exists for). Fix: frame.PeekType must refuse a field number
// above protowire.MaxValidNumber (or any tag varint longer than the 32 bits a broker reads).
func TestReviewWideTypeTagSmugglesProducer(t *testing.T) {
	cmd := smuggledProducer(t, forbiddenTopic)
	if typ, _, topics, ok := brokerActsOn(cmd); !ok || typ != pb.BaseCommand_PRODUCER || len(topics) != 1 || topics[0] != forbiddenTopic {
		t.Fatalf("the broker model reads %v %v (%v): the test's frame is wrong", typ, topics, ok)
	}
	t.Run("filter", func(t *testing.T) {
		h := newFilterHarness(t)
		reached, _ := h.run(t, cmd)
		checkBrokerActs(t, cmd, reached)
	})
	t.Run("session", func(t *testing.T) {
		p, got, _, _ := attackSession(t, nil)
		p.c.Write(rawFrame(cmd))
		brokerGotNothingForbidden(t, p, got)
	})
}

// frameLimitRelay stands between the proxy and a test broker and does what Pulsar's
// ServerCnx pipeline does first: a LengthFieldBasedFrameDecoder of max_message_size plus
// Commands.MESSAGE_SIZE_FRAME_PADDING (10 KiB) over the whole frame, length field
// included. A frame over it fails the decoder and the broker closes the connection. It
// counts those closes.
type frameLimitRelay struct {
	limit  int
	mu     sync.Mutex
	closes []int // the sizes of the frames that closed a connection
}

func newFrameLimitRelay(t *testing.T, to brokers.Broker, limit int) (*frameLimitRelay, brokers.Broker) {
	r := &frameLimitRelay{limit: limit}
	return r, relayTo(t, to, r.upstream)
}

// relayTo stands a relay on loopback in front of the broker to: what the broker sends goes to
// the client as it is, what the client sends through upstream, which judges it as a broker
// would (and closes the connection as that broker would).
func relayTo(t *testing.T, to brokers.Broker, upstream func(client, broker net.Conn)) brokers.Broker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b, err := net.Dial("tcp", to.Addr())
			if err != nil {
				c.Close()
				continue
			}
			wg.Add(2)
			go func() { defer wg.Done(); io.Copy(c, b); c.Close() }()
			go func() { defer wg.Done(); upstream(c, b) }()
		}
	}()
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	return brokers.Broker{URL: "pulsar://" + ln.Addr().String(), Host: host, Port: port}
}

func (r *frameLimitRelay) upstream(c, b net.Conn) {
	defer c.Close()
	defer b.Close()
	hdr := make([]byte, 4)
	for {
		if _, err := io.ReadFull(c, hdr); err != nil {
			return
		}
		size := int(binary.BigEndian.Uint32(hdr)) + 4
		if size > r.limit {
			r.mu.Lock()
			r.closes = append(r.closes, size)
			r.mu.Unlock()
			return // TooLongFrameException: the broker closes the connection
		}
		rest := make([]byte, size-4)
		if _, err := io.ReadFull(c, rest); err != nil {
			return
		}
		if _, err := b.Write(append(append([]byte(nil), hdr...), rest...)); err != nil {
			return
		}
	}
}

func (r *frameLimitRelay) closed() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.closes)
}

// TestReviewMultiplexedFrameGrowsOverTheBrokersLimit: a hostile client on a shared broker
// connection sends a SEND frame of exactly the broker's limit (max_message_size + 10 KiB),
// which the proxy measures and lets through; the proxy then rewrites its producer id
// (client id 0, one byte) to the connection's id (two bytes once the connection has handed
// out 128 producer ids, which the attacker can do itself by creating producers), and the
// frame the broker reads is one byte over its limit. Pulsar's frame decoder fails and the
// broker closes the shared connection: every neighbour's producers and consumers are closed
// and its topic-list watchers' clients disconnected, as often as the attacker likes. Fix:
// check the size of the frame as it goes to the broker (after re-encoding and the id
// mapping, e.g. in mux.Member.Send), not the client's.
func TestReviewMultiplexedFrameGrowsOverTheBrokersLimit(t *testing.T) {
	b, target := newMuxBroker(t, 10)
	b.mu.Lock()
	b.maxMessage = 1 << 10
	b.mu.Unlock()
	limit := 1<<10 + 10<<10
	relay, front := newFrameLimitRelay(t, target, limit)
	cfg, _ := muxConfig(t, 1<<20)
	addr, _ := startProxy(t, cfg, nil, oneTarget{front})
	n := newNeighbour(t, addr, front)
	n.check(1)

	hostile := muxClient(t, addr, front)
	// 130 producers: the connection's producer ids now need two bytes; the last is the
	// client's id 0.
	for id := uint64(130); id <= 130; id-- {
		hostile.send(&pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{
			Topic: proto.String("t"), ProducerId: proto.Uint64(id), RequestId: proto.Uint64(id)}})
		if got := hostile.recv(); got.GetType() != pb.BaseCommand_PRODUCER_SUCCESS {
			t.Fatalf("producer %d: %v", id, got)
		}
	}
	send := &pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{ProducerId: proto.Uint64(0), SequenceId: proto.Uint64(1)}}
	md := &pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(1)}
	empty, err := frame.AppendPayloadCommand(nil, send, nil, md, nil)
	if err != nil {
		t.Fatal(err)
	}
	exact, err := frame.AppendPayloadCommand(nil, send, nil, md, bytes.Repeat([]byte{'x'}, limit-len(empty)))
	if err != nil || len(exact) != limit {
		t.Fatalf("frame of %d bytes (%v), want %d", len(exact), err, limit)
	}
	hostile.c.Write(exact)
	got := hostile.recv()
	if closes := relay.closed(); len(closes) > 0 {
		t.Fatalf("the proxy let through a frame of %d bytes; it reached the broker as %d bytes, over its limit of %d, and the broker closed the shared connection: every neighbour lost its producers and consumers (the hostile client got %v)",
			len(exact), closes[0], limit, got.GetType())
	}
	// At the limit as the client sent it, over it once its producer id is the connection's:
	// the proxy refuses it, and the sender's session ends (a client that honours the broker's
	// max_message_size never comes near: its frames stay under the limit by the padding).
	if got.GetError().GetError() != pb.ServerError_NotAllowedError {
		t.Fatalf("the frame over the limit once mapped: %v, want NotAllowedError", got)
	}
	n.check(2)
}
