package frame

import (
	"math"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/fastwire"
)

// CanonicalCommand reports whether command (a BaseCommand's bytes) is already what a strict
// decode and re-encode of its type and own sub-message would write: the type field, then the
// sub-message of type t, nothing else, every field known, each in its one canonical encoding.
// Forwarding such bytes is forwarding the re-encoding, without making it. False is no
// verdict: the caller decodes.
func CanonicalCommand(t pb.BaseCommand_Type, command []byte) bool {
	own := protowire.Number(t)
	num, wt, n := fastwire.ConsumeTag(command)
	if n != 1 || num != 1 || wt != protowire.VarintType {
		return false
	}
	v, m := fastwire.ConsumeVarint(command[n:])
	if m < 0 || v != uint64(t) || !minimal(command[n:], m) {
		return false
	}
	rest := command[n+m:]
	num, wt, n = fastwire.ConsumeTag(rest)
	if n < 0 || num != own || wt != protowire.BytesType || !minimal(rest, n) {
		return false
	}
	sub, m := fastwire.ConsumeBytes(rest[n:])
	if m < 0 || n+m != len(rest) || !minimal(rest[n:], m-len(sub)) {
		return false
	}
	f := shapes().command.field(own)
	return f != nil && f.message != nil && canonical(f.message, sub, 0)
}

// CanonicalMessage reports whether b is, byte for byte, what a strict decode and re-encode of
// the message m describes would write (see CanonicalCommand).
func CanonicalMessage(m protoreflect.MessageDescriptor, b []byte) bool {
	s := shapes().of(m)
	return s != nil && canonical(s, b, 0)
}

// canonicalMetadata is CanonicalMessage for a SEND's MessageMetadata, without the lookup.
func canonicalMetadata(b []byte) bool { return canonical(shapes().metadata, b, 0) }

// maxCanonicalDepth bounds the nesting a canonical message may have (Pulsar's go three deep).
const maxCanonicalDepth = 16

// canonical checks one message's bytes against its shape: field numbers ascending (a repeated
// field's elements together), each field of its kind's wire type with the value Go writes
// back unchanged (minimal varints, an int32's sign extended, a bool 0 or 1, an enum one of its
// values), nested messages alike, and every required field there.
func canonical(s *shape, b []byte, depth int) bool {
	if depth > maxCanonicalDepth {
		return false
	}
	var last protowire.Number
	var seen uint64 // required fields present, by their index in s.required
	for len(b) > 0 {
		num, wt, n := fastwire.ConsumeTag(b)
		if n < 0 || !minimal(b, n) {
			return false
		}
		f := s.field(num)
		if f == nil || wt != f.wire || num < last || (num == last && !f.repeated) {
			return false
		}
		last = num
		m := f.value(b[n:], depth)
		if m < 0 {
			return false
		}
		b = b[n+m:]
		if f.required >= 0 {
			seen |= 1 << f.required
		}
	}
	return seen == s.allRequired
}

// minimal reports whether the n-byte varint at the start of b (read without error) is in its
// shortest form: one byte, or a last byte that is not zero (a zero last byte only pads).
func minimal(b []byte, n int) bool { return n == 1 || b[n-1] != 0 }

// value checks one field value at the start of b and returns its length (-1: not canonical).
func (f *fieldShape) value(b []byte, depth int) int {
	switch f.wire {
	case protowire.VarintType:
		v, n := fastwire.ConsumeVarint(b)
		if n < 0 || !minimal(b, n) || !f.varintOK(v) {
			return -1
		}
		return n
	case protowire.Fixed32Type:
		_, n := protowire.ConsumeFixed32(b)
		return n
	case protowire.Fixed64Type:
		_, n := protowire.ConsumeFixed64(b)
		return n
	case protowire.BytesType:
		v, n := fastwire.ConsumeBytes(b)
		if n < 0 || !minimal(b, n-len(v)) {
			return -1
		}
		if f.message != nil && !canonical(f.message, v, depth+1) {
			return -1
		}
		return n
	}
	return -1
}

// varintOK reports whether Go decodes v and writes back v itself.
func (f *fieldShape) varintOK(v uint64) bool {
	switch f.kind {
	case protoreflect.Int32Kind:
		return v == uint64(int64(int32(v)))
	case protoreflect.Uint32Kind:
		return v <= math.MaxUint32
	case protoreflect.Int64Kind, protoreflect.Uint64Kind:
		return true
	case protoreflect.BoolKind:
		return v <= 1
	case protoreflect.EnumKind: // a closed enum: another number is kept as an unknown field
		return v == uint64(int64(int32(v))) && f.enum.ByNumber(protoreflect.EnumNumber(int32(v))) != nil
	}
	return false
}

// A shape is what the canonical check needs of a message descriptor, built once.
type shape struct {
	fields      []*fieldShape // by field number; nil where the message has none
	allRequired uint64        // one bit per required field
}

type fieldShape struct {
	kind     protoreflect.Kind
	wire     protowire.Type
	repeated bool
	required int // its bit in shape.allRequired; -1 when optional or repeated
	message  *shape
	enum     protoreflect.EnumValueDescriptors
}

func (s *shape) field(num protowire.Number) *fieldShape {
	if num < 1 || int(num) >= len(s.fields) {
		return nil
	}
	return s.fields[num]
}

// shapeSet holds the shapes of every message the protocol's BaseCommand and MessageMetadata
// reach.
type shapeSet struct {
	all               map[protoreflect.FullName]*shape
	command, metadata *shape // looked up once: every SEND asks for them
}

// The shapes are built when first asked for (some 270 KB a direct-only proxy never needs),
// then read through an atomic pointer: a sync.Once's call cost every SEND's check 5 %.
var builtShapes atomic.Pointer[shapeSet]

func shapes() *shapeSet {
	if s := builtShapes.Load(); s != nil {
		return s
	}
	return buildShapes()
}

var buildShapes = sync.OnceValue(func() *shapeSet {
	set := &shapeSet{all: map[protoreflect.FullName]*shape{}}
	set.command = set.build((&pb.BaseCommand{}).ProtoReflect().Descriptor())
	set.metadata = set.build((&pb.MessageMetadata{}).ProtoReflect().Descriptor())
	set.build((&pb.SingleMessageMetadata{}).ProtoReflect().Descriptor())
	builtShapes.Store(set)
	return set
})

func (set *shapeSet) of(m protoreflect.MessageDescriptor) *shape { return set.all[m.FullName()] }

// build makes the shape of m and of the messages it holds. A message whose fields Go would
// not write back as read (a packed list, a group, a map, a kind not handled here) gets no
// field for them: such bytes are never canonical.
func (set *shapeSet) build(m protoreflect.MessageDescriptor) *shape {
	if s, ok := set.all[m.FullName()]; ok {
		return s
	}
	s := &shape{}
	set.all[m.FullName()] = s // before the fields: a message may hold itself
	fds := m.Fields()
	top := 0
	for i := 0; i < fds.Len(); i++ {
		top = max(top, int(fds.Get(i).Number()))
	}
	s.fields = make([]*fieldShape, top+1)
	required := 0
	for i := 0; i < fds.Len(); i++ {
		fd := fds.Get(i)
		f := set.fieldShape(fd)
		if f == nil {
			continue
		}
		if fd.Cardinality() == protoreflect.Required {
			if required == 64 { // not in one bit set: never canonical
				s.fields = nil
				return s
			}
			f.required = required
			s.allRequired |= 1 << required
			required++
		}
		s.fields[fd.Number()] = f
	}
	return s
}

func (set *shapeSet) fieldShape(fd protoreflect.FieldDescriptor) *fieldShape {
	if fd.IsMap() || fd.IsPacked() || fd.ContainingOneof() != nil {
		return nil
	}
	f := &fieldShape{kind: fd.Kind(), repeated: fd.IsList(), required: -1}
	switch fd.Kind() {
	case protoreflect.Int32Kind, protoreflect.Uint32Kind, protoreflect.Int64Kind, protoreflect.Uint64Kind, protoreflect.BoolKind:
		f.wire = protowire.VarintType
	case protoreflect.EnumKind:
		f.wire, f.enum = protowire.VarintType, fd.Enum().Values()
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind, protoreflect.FloatKind:
		f.wire = protowire.Fixed32Type
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind, protoreflect.DoubleKind:
		f.wire = protowire.Fixed64Type
	case protoreflect.StringKind, protoreflect.BytesKind:
		f.wire = protowire.BytesType
	case protoreflect.MessageKind:
		f.wire, f.message = protowire.BytesType, set.build(fd.Message())
	default:
		return nil
	}
	return f
}
