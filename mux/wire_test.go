package mux

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// TestUpBytesKeepsEveryOtherByte: the bytes path changes the id and the sub-message's
// length, nothing else: fields the proxy does not know, in the sub-message and beside it,
// go on as they came.
func TestUpBytesKeepsEveryOtherByte(t *testing.T) {
	m, c := NewMapper(), NewClient()
	other := NewClient()
	for own := range uint64(300) { // so that c's producer id takes two varint bytes
		if _, err := m.UpBytes(other, producerCmd(own)); err != nil {
			t.Fatal(err)
		}
	}
	acceptedProducer(t, m, c, 1)
	sub := protowire.AppendTag(nil, 1, protowire.VarintType) // producer_id
	sub = protowire.AppendVarint(sub, 1)
	sub = protowire.AppendTag(sub, 2, protowire.VarintType) // sequence_id
	sub = protowire.AppendVarint(sub, 99)
	sub = protowire.AppendTag(sub, 900, protowire.BytesType) // unknown to the proxy
	sub = protowire.AppendBytes(sub, []byte("keep me"))
	raw := protowire.AppendTag(nil, 1, protowire.VarintType)
	raw = protowire.AppendVarint(raw, uint64(pb.BaseCommand_SEND))
	raw = protowire.AppendTag(raw, 6, protowire.BytesType)
	raw = protowire.AppendBytes(raw, sub)
	raw = protowire.AppendTag(raw, 901, protowire.BytesType)
	raw = protowire.AppendBytes(raw, []byte("and me"))
	out, err := m.UpBytes(c, raw)
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := frame.Decode(out)
	if err != nil {
		t.Fatal(err)
	}
	if cmd.GetSend().GetProducerId() != 301 || cmd.GetSend().GetSequenceId() != 99 {
		t.Fatalf("mapped SEND: %v", cmd)
	}
	if !bytes.Contains(out, []byte("keep me")) || !bytes.HasSuffix(out, []byte("and me")) {
		t.Fatalf("unknown fields lost: %x", out)
	}
	if len(out) != len(raw)+1 { // the id grew from one varint byte to two
		t.Fatalf("%d bytes out of %d: more than the id changed", len(out), len(raw))
	}
}

// TestUpBytesOddFormsAreDecoded: a sub-message or an id given twice is not rewritten in
// place (a broker could read another value than the proxy mapped); such a command takes the
// decoding path and goes on canonical, with the value a protobuf reader takes (the last).
func TestUpBytesOddFormsAreDecoded(t *testing.T) {
	m, c := NewMapper(), NewClient()
	for _, own := range []uint64{1, 2} {
		acceptedProducer(t, m, c, own)
	}
	twice := append(sendCmd(1, 5), sendCmd(2, 6)...) // two type fields: refused by the peek
	if _, err := m.UpBytes(c, twice); err == nil {
		t.Fatal("a command with two types was mapped")
	}
	sub := protowire.AppendTag(nil, 1, protowire.VarintType)
	sub = protowire.AppendVarint(sub, 1)
	sub = protowire.AppendTag(sub, 2, protowire.VarintType)
	sub = protowire.AppendVarint(sub, 7)
	sub = protowire.AppendTag(sub, 1, protowire.VarintType) // producer_id again
	sub = protowire.AppendVarint(sub, 2)
	raw := protowire.AppendTag(nil, 1, protowire.VarintType)
	raw = protowire.AppendVarint(raw, uint64(pb.BaseCommand_SEND))
	raw = protowire.AppendTag(raw, 6, protowire.BytesType)
	raw = protowire.AppendBytes(raw, sub)
	out, err := m.UpBytes(c, raw)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := proto.Marshal(&pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{ProducerId: proto.Uint64(2), SequenceId: proto.Uint64(7)}})
	if !bytes.Equal(out, want) {
		t.Fatalf("got %x, want the canonical %x", out, want)
	}
}
