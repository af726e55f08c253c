package mux

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// The bytes path rewrites ids in the client's (and the broker's) bytes, in place where the
// widths allow; the decoding path decodes, maps and re-encodes. The edge decides on the
// strictly decoded command (and on the multiplexed plane hands on its canonical encoding),
// so the bytes path must send the broker exactly what that decision saw, ids mapped: the fuzz
// targets below run both paths on two mappings set up alike, for every command that decodes
// strictly (what the edge lets through; frame.Decode refuses the rest before the mapping
// sees it), and require that what the bytes path sends (it may refuse more: a type given
// twice) the decoding path sends too, decoding to the same command, and as the very same
// bytes whenever the input was in canonical form.

// twinMappings are two mappings set up alike: others producers and consumers taken before
// the client's (so that its connection ids take one, two or three varint bytes), then the
// client's producer 1 and consumer 1, accepted.
func twinMappings(tb testing.TB, others uint16) (m1 *Mapper, c1 *Client, m2 *Mapper, c2 *Client) {
	setup := func() (*Mapper, *Client) {
		m, c := NewMapper(), NewClient()
		m.next[producerID], m.next[consumerID], m.next[requestID] = uint64(others), uint64(others), uint64(others)
		acceptedProducer(tb, m, c, 1)
		acceptedConsumer(tb, m, c, 1)
		return m, c
	}
	m1, c1 = setup()
	m2, c2 = setup()
	return m1, c1, m2, c2
}

// sameSend compares what the two paths gave; raw is what came in.
func sameSend(t *testing.T, raw, viaBytes []byte, errBytes error, viaDecode []byte, errDecode error) {
	t.Helper()
	if errBytes != nil {
		return // refused: nothing reaches the broker (the bytes path may be the stricter)
	}
	if errDecode != nil {
		t.Fatalf("the bytes path sent %x, the decoding path refused (%v), for %x", viaBytes, errDecode, raw)
	}
	got, err := frame.Decode(viaBytes)
	if err != nil {
		t.Fatalf("the bytes path sent what does not decode (%v): %x from %x", err, viaBytes, raw)
	}
	want := mustDecode(viaDecode)
	if !proto.Equal(got, want) {
		t.Fatalf("the bytes path sent %v, the decoding path %v, for %x", got, want, raw)
	}
	if canonical, err := proto.Marshal(mustDecode(raw)); err == nil && bytes.Equal(canonical, raw) && !bytes.Equal(viaBytes, viaDecode) {
		t.Fatalf("canonical input %x: the bytes path sent %x, the re-encoding %x", raw, viaBytes, viaDecode)
	}
}

func FuzzUpInPlace(f *testing.F) {
	for _, cmd := range []*pb.BaseCommand{
		{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(7)}},
		{Type: pb.BaseCommand_FLOW.Enum(), Flow: &pb.CommandFlow{ConsumerId: proto.Uint64(1), MessagePermits: proto.Uint32(1000)}},
		{Type: pb.BaseCommand_CLOSE_PRODUCER.Enum(), CloseProducer: &pb.CommandCloseProducer{ProducerId: proto.Uint64(1), RequestId: proto.Uint64(3)}},
		{Type: pb.BaseCommand_ACK.Enum(), Ack: &pb.CommandAck{ConsumerId: proto.Uint64(1), AckType: pb.CommandAck_Individual.Enum(), RequestId: proto.Uint64(9)}},
	} {
		b, _ := proto.Marshal(cmd)
		f.Add(b, uint16(0))
		f.Add(b, uint16(130))
	}
	f.Add(producerCmd(5), uint16(70))
	f.Add(paddedSend(), uint16(1))   // producer_id 1 in two bytes: mapped to 2, one byte
	f.Add(paddedSend(), uint16(130)) // ... mapped to 131, two bytes: in place
	f.Fuzz(func(t *testing.T, raw []byte, others uint16) {
		cmd, err := frame.Decode(raw)
		if err != nil {
			return // the edge refuses it before the mapping
		}
		m1, c1, m2, c2 := twinMappings(t, others)
		viaBytes, errBytes := m1.AppendUp(nil, c1, raw)
		var viaDecode []byte
		errDecode := m2.Up(c2, cmd)
		if errDecode == nil {
			viaDecode, errDecode = marshalCommand(cmd)
		}
		sameSend(t, raw, viaBytes, errBytes, viaDecode, errDecode)
	})
}

func FuzzDownInPlace(f *testing.F) {
	for _, cmd := range []*pb.BaseCommand{
		{Type: pb.BaseCommand_SEND_RECEIPT.Enum(), SendReceipt: &pb.CommandSendReceipt{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(7)}},
		{Type: pb.BaseCommand_MESSAGE.Enum(), Message: &pb.CommandMessage{ConsumerId: proto.Uint64(1), MessageId: &pb.MessageIdData{LedgerId: proto.Uint64(1), EntryId: proto.Uint64(2)}}},
		{Type: pb.BaseCommand_CLOSE_CONSUMER.Enum(), CloseConsumer: &pb.CommandCloseConsumer{ConsumerId: proto.Uint64(131), RequestId: proto.Uint64(1)}},
	} {
		b, _ := proto.Marshal(cmd)
		f.Add(b, uint16(0))
		f.Add(b, uint16(130))
	}
	f.Fuzz(func(t *testing.T, raw []byte, others uint16) {
		cmd, err := frame.Decode(raw)
		if err != nil {
			return // a broker's frame the client's own parser judges
		}
		m1, _, m2, _ := twinMappings(t, others)
		viaBytes, _, errBytes := m1.AppendDown(nil, raw)
		var viaDecode []byte
		_, errDecode := m2.Down(cmd)
		if errDecode == nil {
			viaDecode, errDecode = marshalCommand(cmd)
		}
		sameSend(t, raw, viaBytes, errBytes, viaDecode, errDecode)
	})
}

// paddedSend is a SEND for producer 1 whose id and sequence id are written in two bytes each
// (varints a protobuf reader takes, not the canonical ones): bytes rewritten in place keep
// the padded sequence id, re-encoded ones do not.
func paddedSend() []byte {
	sub := protowire.AppendTag(nil, 1, protowire.VarintType)
	sub = append(sub, 0x81, 0x00) // 1, padded
	sub = protowire.AppendTag(sub, 2, protowire.VarintType)
	sub = append(sub, 0x87, 0x00) // 7, padded
	raw := protowire.AppendTag(nil, 1, protowire.VarintType)
	raw = protowire.AppendVarint(raw, uint64(pb.BaseCommand_SEND))
	raw = protowire.AppendTag(raw, 6, protowire.BytesType)
	return protowire.AppendBytes(raw, sub)
}

// TestInPlaceRewrite: an id whose mapped value is as wide as the client's encoding is
// overwritten where it stands (every other byte the client's, the padded varint's width
// kept); one of another width has the sub-message rebuilt around it; both decode to the
// command the decoding path re-encodes.
func TestInPlaceRewrite(t *testing.T) {
	for _, tc := range []struct {
		others  uint16
		inPlace bool
	}{{130, true}, {1, false}} {
		m, c, m2, c2 := twinMappings(t, tc.others)
		raw := paddedSend()
		out, err := m.AppendUp(nil, c, raw)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(out) == len(raw); got != tc.inPlace {
			t.Fatalf("others %d: %d bytes from %d, in place %v", tc.others, len(out), len(raw), got)
		}
		cmd := mustDecode(raw)
		if err := m2.Up(c2, cmd); err != nil {
			t.Fatal(err)
		}
		re, _ := marshalCommand(cmd)
		sameSend(t, raw, out, nil, re, nil)
		if tc.inPlace && bytes.Equal(out, re) {
			t.Fatalf("the in-place bytes %x are the re-encoding's: the padded form was lost", out)
		}
	}
}

// TestRewriteWidthsThatCancel: one id grows by a byte as another shrinks by one (the sub-
// message's length stays): not a case for overwriting in place, the sub-message is rebuilt,
// and the broker reads both ids as mapped.
func TestRewriteWidthsThatCancel(t *testing.T) {
	m, c, m2, c2 := twinMappings(t, 130) // producer 1 maps to 131: two bytes
	sub := protowire.AppendTag(nil, 1, protowire.VarintType)
	sub = protowire.AppendVarint(sub, 1) // producer_id: one byte, mapped to two
	sub = protowire.AppendTag(sub, 2, protowire.VarintType)
	sub = append(sub, 0x85, 0x80, 0x00) // request_id 5 in three bytes, mapped to two
	raw := protowire.AppendTag(nil, 1, protowire.VarintType)
	raw = protowire.AppendVarint(raw, uint64(pb.BaseCommand_CLOSE_PRODUCER))
	raw = protowire.AppendTag(raw, 15, protowire.BytesType)
	raw = protowire.AppendBytes(raw, sub)
	out, err := m.AppendUp(nil, c, raw)
	if err != nil {
		t.Fatal(err)
	}
	cmd := mustDecode(raw)
	if err := m2.Up(c2, cmd); err != nil {
		t.Fatal(err)
	}
	re, _ := marshalCommand(cmd)
	sameSend(t, raw, out, nil, re, nil)
}
