package session

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

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
