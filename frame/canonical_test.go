package frame

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// Every message Go writes, each field set, is canonical: the check takes the fast path for
// what Go's client sends.
func TestGoEncodingsAreCanonical(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	base := (&pb.BaseCommand{}).ProtoReflect().Descriptor()
	for i := 0; i < base.Fields().Len(); i++ {
		fd := base.Fields().Get(i)
		if fd.Message() == nil {
			continue
		}
		for round := 0; round < 20; round++ {
			cmd := &pb.BaseCommand{Type: pb.BaseCommand_Type(fd.Number()).Enum()}
			sub := cmd.ProtoReflect().Mutable(fd).Message()
			fill(rng, sub, 0)
			b, err := proto.Marshal(cmd)
			if err != nil {
				t.Fatal(err)
			}
			if !CanonicalCommand(cmd.GetType(), b) {
				t.Fatalf("%v as Go writes it is not canonical: % x", cmd.GetType(), b)
			}
		}
	}
	for _, m := range []proto.Message{&pb.MessageMetadata{}, &pb.SingleMessageMetadata{}} {
		for round := 0; round < 50; round++ {
			msg := m.ProtoReflect().New()
			fill(rng, msg, 0)
			b, err := proto.Marshal(msg.Interface())
			if err != nil {
				t.Fatal(err)
			}
			if !CanonicalMessage(msg.Descriptor(), b) {
				t.Fatalf("%s as Go writes it is not canonical: % x", msg.Descriptor().FullName(), b)
			}
		}
	}
}

// fill sets every field of m (lists of up to three elements) with a value of its kind, each
// optional field present or not at random; required fields always.
func fill(rng *rand.Rand, m protoreflect.Message, depth int) {
	fds := m.Descriptor().Fields()
	for i := 0; i < fds.Len(); i++ {
		fd := fds.Get(i)
		if fd.Cardinality() != protoreflect.Required && rng.IntN(3) == 0 {
			continue
		}
		if fd.Message() != nil && depth > 3 && fd.Cardinality() != protoreflect.Required {
			continue
		}
		if fd.IsList() {
			l := m.Mutable(fd).List()
			for n := rng.IntN(4); n > 0; n-- {
				if fd.Message() != nil {
					e := l.NewElement()
					fill(rng, e.Message(), depth+1)
					l.Append(e)
				} else {
					l.Append(scalar(rng, fd))
				}
			}
			continue
		}
		if fd.Message() != nil {
			fill(rng, m.Mutable(fd).Message(), depth+1)
			continue
		}
		m.Set(fd, scalar(rng, fd))
	}
}

func scalar(rng *rand.Rand, fd protoreflect.FieldDescriptor) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(rng.IntN(2) == 1)
	case protoreflect.EnumKind:
		vs := fd.Enum().Values()
		return protoreflect.ValueOfEnum(vs.Get(rng.IntN(vs.Len())).Number())
	case protoreflect.Int32Kind:
		return protoreflect.ValueOfInt32(int32(rng.Uint32()) >> rng.IntN(32))
	case protoreflect.Uint32Kind:
		return protoreflect.ValueOfUint32(rng.Uint32() >> rng.IntN(32))
	case protoreflect.Int64Kind:
		return protoreflect.ValueOfInt64(int64(rng.Uint64()) >> rng.IntN(64))
	case protoreflect.Uint64Kind:
		return protoreflect.ValueOfUint64(rng.Uint64() >> rng.IntN(64))
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(rng.Float64())
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(rng.Float32())
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(string(rune('a' + rng.IntN(26))))
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte{byte(rng.Uint32())})
	}
	panic("kind not handled: " + fd.Kind().String())
}

// What is not the one encoding Go writes back is never canonical: the caller decodes it.
func TestCanonicalCommandRefuses(t *testing.T) {
	send := func(fields ...[]byte) []byte {
		var sub []byte
		for _, f := range fields {
			sub = append(sub, f...)
		}
		b := protowire.AppendTag(nil, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(pb.BaseCommand_SEND))
		b = protowire.AppendTag(b, 6, protowire.BytesType)
		return protowire.AppendBytes(b, sub)
	}
	varint := func(num protowire.Number, v uint64) []byte {
		return protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.VarintType), v)
	}
	producer, sequence := varint(1, 7), varint(2, 9)
	if !CanonicalCommand(pb.BaseCommand_SEND, send(producer, sequence)) {
		t.Fatal("a plain SEND is not canonical")
	}
	cases := map[string][]byte{
		"fields out of order":          send(sequence, producer),
		"a field twice":                send(producer, producer, sequence),
		"a required field missing":     send(producer),
		"an unknown field":             send(producer, sequence, varint(100, 1)),
		"an unknown group":             send(producer, sequence, protowire.AppendTag(nil, 100, protowire.StartGroupType), protowire.AppendTag(nil, 100, protowire.EndGroupType)),
		"a varint not minimal":         send([]byte{0x08, 0x87, 0x00}, sequence),
		"a tag not minimal":            send([]byte{0x88, 0x00, 0x07}, sequence),
		"a bool of 2":                  send(producer, sequence, varint(7, 2)),
		"a wide tag":                   send(producer, sequence, protowire.AppendVarint(nil, 1<<32|8), []byte{1}),
		"a field of another wire type": send(producer, sequence, protowire.AppendBytes(protowire.AppendTag(nil, 3, protowire.BytesType), nil)),
		"another sub-message too": append(send(producer, sequence),
			protowire.AppendBytes(protowire.AppendTag(nil, 9, protowire.BytesType), varint(1, 1))...),
		"trailing bytes":          append(send(producer, sequence), 0),
		"the type not SEND":       append([]byte{0x08, byte(pb.BaseCommand_FLOW)}, send(producer, sequence)[2:]...),
		"the type not minimal":    append([]byte{0x08, 0x86, 0x00}, send(producer, sequence)[2:]...),
		"a truncated sub-message": send(producer, sequence)[:len(send(producer, sequence))-1],
	}
	for name, b := range cases {
		if CanonicalCommand(pb.BaseCommand_SEND, b) {
			t.Errorf("%s: canonical, want not", name)
		}
	}
	// int32 and enums: a negative int32 is sign extended to ten bytes; a closed enum's
	// unknown number would be kept as an unknown field.
	ack := func(fields ...[]byte) []byte {
		var sub []byte
		for _, f := range fields {
			sub = append(sub, f...)
		}
		b := protowire.AppendTag(nil, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(pb.BaseCommand_ACK))
		b = protowire.AppendTag(b, int32Number(pb.BaseCommand_ACK), protowire.BytesType)
		return protowire.AppendBytes(b, sub)
	}
	consumer := varint(1, 1)
	if !CanonicalCommand(pb.BaseCommand_ACK, ack(consumer, varint(2, 0))) {
		t.Fatal("a plain ACK is not canonical")
	}
	if CanonicalCommand(pb.BaseCommand_ACK, ack(consumer, varint(2, 5))) {
		t.Error("an ACK of an unknown ack type: canonical, want not")
	}
	redeliver := func(v uint64) []byte { // CommandRedeliverUnacknowledgedMessages.consumer_epoch is int64; use a FLOW's uint32
		b := protowire.AppendTag(nil, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(pb.BaseCommand_FLOW))
		b = protowire.AppendTag(b, int32Number(pb.BaseCommand_FLOW), protowire.BytesType)
		return protowire.AppendBytes(b, append(varint(1, 1), varint(2, v)...))
	}
	if !CanonicalCommand(pb.BaseCommand_FLOW, redeliver(1000)) || CanonicalCommand(pb.BaseCommand_FLOW, redeliver(1<<32)) {
		t.Error("FLOW's uint32 permits: want 1000 canonical and 1<<32 (which Go truncates) not")
	}
}

func int32Number(t pb.BaseCommand_Type) protowire.Number { return protowire.Number(t) }

// An int32 written in five bytes (as some encoders write a negative one) decodes to the same
// value as its ten-byte form, but Go writes ten: not canonical.
func TestCanonicalInt32SignExtension(t *testing.T) {
	md := (&pb.MessageMetadata{}).ProtoReflect().Descriptor()
	base, err := proto.Marshal(&pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(2)})
	if err != nil {
		t.Fatal(err)
	}
	minusOne := int32(-1)
	ten := protowire.AppendVarint(protowire.AppendTag(nil, 11, protowire.VarintType), uint64(int64(minusOne)))
	five := protowire.AppendVarint(protowire.AppendTag(nil, 11, protowire.VarintType), uint64(uint32(0xffffffff)))
	if !CanonicalMessage(md, append(bytes.Clone(base), ten...)) {
		t.Error("num_messages_in_batch -1 in ten bytes: not canonical, want canonical")
	}
	if CanonicalMessage(md, append(bytes.Clone(base), five...)) {
		t.Error("num_messages_in_batch -1 in five bytes: canonical, want not")
	}
}

// FuzzCanonicalCommand: whatever the check calls canonical decodes strictly and is written
// back by Go byte for byte, the sub-message alone (what the edge would forward re-encoded).
func FuzzCanonicalCommand(f *testing.F) {
	for _, cmd := range []*pb.BaseCommand{
		{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(2), NumMessages: proto.Int32(3)}},
		{Type: pb.BaseCommand_ACK.Enum(), Ack: &pb.CommandAck{ConsumerId: proto.Uint64(1), AckType: pb.CommandAck_Individual.Enum(),
			MessageId: []*pb.MessageIdData{{LedgerId: proto.Uint64(1), EntryId: proto.Uint64(2), AckSet: []int64{-1, 3}}}}},
		{Type: pb.BaseCommand_FLOW.Enum(), Flow: &pb.CommandFlow{ConsumerId: proto.Uint64(1), MessagePermits: proto.Uint32(1000)}},
	} {
		b, err := proto.Marshal(cmd)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(int32(cmd.GetType()), b)
	}
	f.Fuzz(func(t *testing.T, typ int32, b []byte) {
		ct := pb.BaseCommand_Type(typ)
		if !CanonicalCommand(ct, b) {
			return
		}
		cmd := new(pb.BaseCommand)
		writtenBack(t, b, cmd)
		if cmd.GetType() != ct {
			t.Fatalf("canonical for %v but of type %v", ct, cmd.GetType())
		}
	})
}

// hasUnknown reports whether m or a message in it has unknown fields.
func hasUnknown(m protoreflect.Message) bool {
	found := len(m.GetUnknown()) > 0
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case found || fd.Message() == nil:
		case fd.IsList():
			for i := 0; i < v.List().Len() && !found; i++ {
				found = hasUnknown(v.List().Get(i).Message())
			}
		default:
			found = hasUnknown(v.Message())
		}
		return !found
	})
	return found
}

// A command nested past MaxNesting does not decode: a broker's parser, which recurses, would
// overflow its stack on a few thousand levels of first_chunk_message_id and close the
// connection (found by an attacker's review: 7,000 levels fit a 64 KiB command).
func TestDeepNestingDoesNotDecode(t *testing.T) {
	for _, depth := range []int{MaxNesting - 3, 6000} {
		id := &pb.MessageIdData{LedgerId: proto.Uint64(1), EntryId: proto.Uint64(1)}
		for i := 0; i < depth; i++ {
			id = &pb.MessageIdData{LedgerId: proto.Uint64(1), EntryId: proto.Uint64(1), FirstChunkMessageId: id}
		}
		b, err := proto.MarshalOptions{}.Marshal(&pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(),
			Send: &pb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(1), MessageId: id}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = Decode(b)
		if shallow := depth < MaxNesting; (err == nil) != shallow {
			t.Errorf("a SEND whose message id nests %d deep (%d bytes): decode error %v", depth, len(b), err)
		}
		if CanonicalCommand(pb.BaseCommand_SEND, b) && depth > maxCanonicalDepth {
			t.Errorf("a SEND nesting %d deep is canonical", depth)
		}
	}
}

// Go's encodings of every command and of MessageMetadata, each mutated a few bytes at a time
// (flipped, replaced, dropped, inserted, a run doubled, cut short): whatever the check calls
// canonical decodes strictly, without unknown fields, and is written back byte for byte.
// (Adopted from an attacker's review; its run of 522,000 commands found nothing.)
func TestCanonicalAgainstMutations(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	base := (&pb.BaseCommand{}).ProtoReflect().Descriptor()
	accepted, tried := 0, 0
	for i := 0; i < base.Fields().Len(); i++ {
		fd := base.Fields().Get(i)
		if fd.Message() == nil {
			continue
		}
		for round := 0; round < 150; round++ {
			cmd := &pb.BaseCommand{Type: pb.BaseCommand_Type(fd.Number()).Enum()}
			fill(rng, cmd.ProtoReflect().Mutable(fd).Message(), 0)
			b, err := proto.Marshal(cmd)
			if err != nil {
				t.Fatal(err)
			}
			for k := 0; k < 20; k++ {
				m := mutate(rng, b)
				tried++
				if CanonicalCommand(cmd.GetType(), m) {
					accepted++
					writtenBack(t, m, new(pb.BaseCommand))
				}
			}
		}
	}
	md := (&pb.MessageMetadata{}).ProtoReflect().Descriptor()
	for round := 0; round < 1500; round++ {
		msg := (&pb.MessageMetadata{}).ProtoReflect()
		fill(rng, msg, 0)
		b, err := proto.Marshal(msg.Interface())
		if err != nil {
			t.Fatal(err)
		}
		for k := 0; k < 20; k++ {
			m := mutate(rng, b)
			tried++
			if CanonicalMessage(md, m) {
				accepted++
				writtenBack(t, m, new(pb.MessageMetadata))
			}
		}
	}
	t.Logf("%d mutations, %d of them canonical", tried, accepted)
}

// writtenBack fails unless b, read strictly into m, has no unknown fields and is written back
// as b.
func writtenBack(t *testing.T, b []byte, m proto.Message) {
	t.Helper()
	if err := strict.Unmarshal(b, m); err != nil {
		t.Fatalf("canonical but does not decode: %v: % x", err, b)
	}
	if hasUnknown(m.ProtoReflect()) {
		t.Fatalf("canonical but with unknown fields: % x", b)
	}
	if again, err := proto.Marshal(m); err != nil || !bytes.Equal(again, b) {
		t.Fatalf("canonical but written back as % x (%v), was % x", again, err, b)
	}
}

// mutate applies one to three random edits to a copy of b.
func mutate(rng *rand.Rand, b []byte) []byte {
	b = bytes.Clone(b)
	for k := rng.IntN(3) + 1; k > 0; k-- {
		if len(b) == 0 {
			return append(b, byte(rng.Uint32()))
		}
		i := rng.IntN(len(b))
		switch rng.IntN(8) {
		case 0:
			b[i] ^= 1 << rng.IntN(8)
		case 1:
			b[i] = []byte{0x00, 0x01, 0x7f, 0x80, 0xff, 0x08, 0x10, 0x0a, 0x12}[rng.IntN(9)]
		case 2:
			b = append(b[:i:i], b[i+1:]...)
		case 3:
			b = append(b[:i:i], append([]byte{byte(rng.Uint32())}, b[i:]...)...)
		case 4:
			b[i]++
		case 5:
			b[i]--
		case 6: // a run doubled
			j := i + rng.IntN(len(b)-i+1)
			b = append(b[:j:j], append(bytes.Clone(b[i:j]), b[j:]...)...)
		case 7:
			b = b[:i]
		}
	}
	return b
}

// FuzzCanonicalMetadata: CanonicalCommand's claim for a SEND's MessageMetadata, which the
// edge's payload check takes without decoding it.
func FuzzCanonicalMetadata(f *testing.F) {
	b, err := proto.Marshal(&pb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(2),
		Properties: []*pb.KeyValue{{Key: proto.String("a"), Value: proto.String("b")}}, NumMessagesInBatch: proto.Int32(-1)})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	md := (&pb.MessageMetadata{}).ProtoReflect().Descriptor()
	f.Fuzz(func(t *testing.T, b []byte) {
		if CanonicalMessage(md, b) {
			writtenBack(t, b, new(pb.MessageMetadata))
		}
	})
}
