package frame

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// PeekType returns BaseCommand.type without unmarshalling the command and
// without allocating. It walks the top-level fields and resolves the type
// exactly as Decode does: field 1 with varint wire type, the last
// occurrence wins, occurrences with another wire type are ignored. Like
// Decode it does not reject values that pb.BaseCommand_Type does not name
// (commands from a newer protocol); callers switch on the known ones.
//
// Only the top level is checked: a command PeekType accepts may still fail
// Decode, but whenever Decode succeeds PeekType returns its GetType().
func PeekType(command []byte) (pb.BaseCommand_Type, error) {
	var (
		seen bool
		typ  int32
	)
	b := command
	for len(b) > 0 {
		num, wt, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, fmt.Errorf("%w: command: %v", ErrMalformed, protowire.ParseError(n))
		}
		b = b[n:]
		if num == 1 && wt == protowire.VarintType {
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return 0, fmt.Errorf("%w: command type: %v", ErrMalformed, protowire.ParseError(n))
			}
			b = b[n:]
			// Enum values are int32; wider varints are truncated, as Decode does.
			seen, typ = true, int32(v)
			continue
		}
		n = protowire.ConsumeFieldValue(num, wt, b)
		if n < 0 {
			return 0, fmt.Errorf("%w: command field %d: %v", ErrMalformed, num, protowire.ParseError(n))
		}
		b = b[n:]
	}
	if !seen {
		return 0, fmt.Errorf("%w: command has no type", ErrMalformed)
	}
	return pb.BaseCommand_Type(typ), nil
}

// Decode unmarshals a command. It is strict: the bytes must be valid
// protobuf and every required field (at any depth) must be present.
// Unknown fields are kept, so re-encoding the result preserves them.
func Decode(command []byte) (*pb.BaseCommand, error) {
	cmd := new(pb.BaseCommand)
	if err := proto.Unmarshal(command, cmd); err != nil {
		return nil, fmt.Errorf("%w: command: %v", ErrMalformed, err)
	}
	return cmd, nil
}
