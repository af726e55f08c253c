package frame

import (
	"fmt"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/fastwire"
)

// PeekType returns BaseCommand.type without unmarshalling the command and
// without allocating, exactly as a Pulsar broker will read it, or an error
// where a broker's reading could differ from ours. A broker's decoder is
// lenient (the last type field wins, unknown values are skipped, tags and
// enum values wider than 32 bits are truncated, other sub-messages are
// ignored), so a filter that decides by type must refuse every encoding
// where two readers could disagree. PeekType therefore walks every
// top-level field and refuses, as ErrMalformed: a command without a type or
// with more than one type field, a type field of another wire type, a type
// outside 0..2^31-1, a field number over protobuf's 2^29-1 (its tag does
// not fit 32 bits, and a broker reads it as the low 32 bits: 1<<32|8 is the
// type field to a broker and an unknown field to protowire), group wire
// types, and anything protowire cannot parse.
// Values that pb.BaseCommand_Type does not name are returned as they are;
// callers decide what to do with types they do not know.
//
// No client sends any of the refused forms: protobuf encoders write the
// type once, as a varint, first.
func PeekType(command []byte) (pb.BaseCommand_Type, error) {
	var (
		seen bool
		typ  pb.BaseCommand_Type
	)
	b := command
	for len(b) > 0 {
		num, wt, n := fastwire.ConsumeTag(b)
		if n < 0 {
			return 0, fmt.Errorf("%w: command: %v", ErrMalformed, protowire.ParseError(n))
		}
		b = b[n:]
		switch {
		case num > protowire.MaxValidNumber:
			return 0, fmt.Errorf("%w: command field number %d out of range", ErrMalformed, num)
		case wt == protowire.StartGroupType || wt == protowire.EndGroupType:
			return 0, fmt.Errorf("%w: command field %d: group wire type", ErrMalformed, num)
		case num == 1 && wt != protowire.VarintType:
			return 0, fmt.Errorf("%w: command type with wire type %d", ErrMalformed, wt)
		case num == 1 && seen:
			return 0, fmt.Errorf("%w: command type given twice", ErrMalformed)
		case num == 1:
			v, n := fastwire.ConsumeVarint(b)
			if n < 0 {
				return 0, fmt.Errorf("%w: command type: %v", ErrMalformed, protowire.ParseError(n))
			}
			if v > math.MaxInt32 {
				return 0, fmt.Errorf("%w: command type %d out of range", ErrMalformed, v)
			}
			b = b[n:]
			seen, typ = true, pb.BaseCommand_Type(v)
			continue
		}
		n = fastwire.ConsumeFieldValue(num, wt, b)
		if n < 0 {
			return 0, fmt.Errorf("%w: command field %d: %v", ErrMalformed, num, protowire.ParseError(n))
		}
		b = b[n:]
	}
	if !seen {
		return 0, fmt.Errorf("%w: command has no type", ErrMalformed)
	}
	return typ, nil
}

// Decode unmarshals a command. It is strict: the bytes must be valid
// protobuf, every required field (at any depth) must be present, and messages nest at most
// MaxNesting deep. Unknown fields are kept, so re-encoding the result preserves them.
func Decode(command []byte) (*pb.BaseCommand, error) {
	cmd := new(pb.BaseCommand)
	if err := strict.Unmarshal(command, cmd); err != nil {
		return nil, fmt.Errorf("%w: command: %v", ErrMalformed, err)
	}
	return cmd, nil
}

// MaxNesting bounds how deep the messages a client sends may nest. A MessageIdData holds
// another (first_chunk_message_id), so a command can nest as deep as its size allows, and a
// broker's parser, which recurses, overflows its stack near 7,000 levels and closes the
// connection: on a shared one, under every client on it. Pulsar's own commands nest four deep.
const MaxNesting = 32

var strict = proto.UnmarshalOptions{RecursionLimit: MaxNesting}
