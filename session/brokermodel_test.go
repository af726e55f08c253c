package session

import (
	"errors"
	"fmt"
	"strings"

	"github.com/pulsar-proxy/pulsar-proxy/authz"
	"github.com/pulsar-proxy/pulsar-proxy/edge"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// A model of how a Pulsar broker reads a command, for tests that ask "what would the broker
// act on?". Pulsar's generated decoder (LightProto) is lenient where Go's protobuf is strict,
// and the differences are what an attacker uses; the model follows LightProto's rules:
//   - a tag is read as a varint of at most 10 bytes truncated to 32 bits, and dispatched on
//     the whole tag (field number and wire type): a known field under another wire type,
//     field number 0 and unknown fields are skipped;
//   - group wire types, truncated input, and a length running past the end fail the parse
//     (the broker then acts on nothing);
//   - enum values it does not know are skipped, keeping an earlier value;
//   - scalars and strings: the last occurrence wins; a sub-message: the last occurrence
//     replaces the earlier ones (LightProto clears before parsing);
//   - strings are decoded as UTF-8 with invalid bytes replaced.
// PulsarDecoder then dispatches on the type and reads only that type's sub-message.

var errModel = errors.New("broker model: frame refused")

type modelReader struct{ b []byte }

func (r *modelReader) varint32() (uint32, error) {
	var v uint64
	for i := 0; i < 10; i++ {
		if len(r.b) == 0 {
			return 0, errModel
		}
		c := r.b[0]
		r.b = r.b[1:]
		if i < 5 {
			v |= uint64(c&0x7f) << (7 * i)
		}
		if c < 0x80 {
			return uint32(v), nil
		}
	}
	return 0, errModel
}

func (r *modelReader) varint64() (uint64, error) {
	var v uint64
	for shift := 0; shift < 64; shift += 7 {
		if len(r.b) == 0 {
			return 0, errModel
		}
		c := r.b[0]
		r.b = r.b[1:]
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return v, nil
		}
	}
	return 0, errModel
}

func (r *modelReader) bytes() ([]byte, error) {
	n, err := r.varint32()
	if err != nil || int32(n) < 0 || int(n) > len(r.b) {
		return nil, errModel
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out, nil
}

// skip skips the value of an unknown tag.
func (r *modelReader) skip(tag uint32) error {
	var n int
	switch tag & 7 {
	case 0:
		_, err := r.varint32()
		return err
	case 1:
		n = 8
	case 2:
		_, err := r.bytes()
		return err
	case 5:
		n = 4
	default:
		return errModel
	}
	if len(r.b) < n {
		return errModel
	}
	r.b = r.b[n:]
	return nil
}

// brokerView is what the model reads from a command: its type and the raw sub-messages by
// field number (the last occurrence of each).
type brokerView struct {
	typ  pb.BaseCommand_Type
	subs map[uint32][]byte
}

func brokerReads(command []byte) (brokerView, error) {
	v := brokerView{subs: map[uint32][]byte{}}
	r := &modelReader{b: command}
	seen := false
	for len(r.b) > 0 {
		tag, err := r.varint32()
		if err != nil {
			return v, err
		}
		switch {
		case tag == 1<<3|0:
			x, err := r.varint32()
			if err != nil {
				return v, err
			}
			if _, known := pb.BaseCommand_Type_name[int32(x)]; known {
				v.typ, seen = pb.BaseCommand_Type(int32(x)), true
			}
		case tag&7 == 2 && tag>>3 >= 2 && tag>>3 <= 68 && isCommandField(tag>>3):
			b, err := r.bytes()
			if err != nil {
				return v, err
			}
			v.subs[tag>>3] = b
		default:
			if err := r.skip(tag); err != nil {
				return v, err
			}
		}
	}
	if !seen {
		return v, errModel
	}
	if _, ok := v.subs[uint32(v.typ)]; !ok {
		return v, errModel // PulsarDecoder's checkArgument(cmd.hasX())
	}
	return v, nil
}

func isCommandField(n uint32) bool {
	_, ok := pb.BaseCommand_Type_name[int32(n)]
	return ok
}

// stringsOf reads the values of string field fn of a sub-message, in order (a singular
// field's value is the last one).
func stringsOf(sub []byte, fn uint32) ([]string, error) {
	r := &modelReader{b: sub}
	var out []string
	for len(r.b) > 0 {
		tag, err := r.varint32()
		if err != nil {
			return nil, err
		}
		if tag == fn<<3|2 {
			b, err := r.bytes()
			if err != nil {
				return nil, err
			}
			out = append(out, strings.ToValidUTF8(string(b), "\uFFFD"))
			continue
		}
		if err := r.skip(tag); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// messagesOf reads the raw values of message field fn of a sub-message.
func messagesOf(sub []byte, fn uint32) ([][]byte, error) {
	r := &modelReader{b: sub}
	var out [][]byte
	for len(r.b) > 0 {
		tag, err := r.varint32()
		if err != nil {
			return nil, err
		}
		if tag == fn<<3|2 {
			b, err := r.bytes()
			if err != nil {
				return nil, err
			}
			out = append(out, b)
			continue
		}
		if err := r.skip(tag); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// lastVarint reads the value of varint field fn of a sub-message: the last occurrence, 0 when
// there is none (LightProto matches the whole tag, so the field under another wire type is
// skipped).
func lastVarint(sub []byte, fn uint32) (uint64, error) {
	r := &modelReader{b: sub}
	var v uint64
	for len(r.b) > 0 {
		tag, err := r.varint32()
		if err != nil {
			return 0, err
		}
		if tag == fn<<3|0 {
			if v, err = r.varint64(); err != nil {
				return 0, err
			}
			continue
		}
		if err := r.skip(tag); err != nil {
			return 0, err
		}
	}
	return v, nil
}

// coordinatorActedOn is the coordinator topic a broker acts on for tc_id field fn: it reads
// the id as a 64-bit number and takes the partition index as a 32-bit int.
func coordinatorActedOn(sub []byte, fn uint32) ([]string, bool) {
	id, err := lastVarint(sub, fn)
	if err != nil {
		return nil, false
	}
	return []string{fmt.Sprintf("%s-partition-%d", edge.CoordinatorAssignTopic, int32(id))}, true
}

// brokerActsOn is what a broker does with a client command: the action it needs at the
// proxy's policy and the topics it acts on. ok=false: the broker refuses the frame. For
// commands that act on ids (SEND, ACK...) topics is empty and action "".
func brokerActsOn(command []byte) (t pb.BaseCommand_Type, action authz.Action, topics []string, ok bool) {
	v, err := brokerReads(command)
	if err != nil {
		return 0, "", nil, false
	}
	sub := v.subs[uint32(v.typ)]
	last := func(fn uint32) []string {
		all, err := stringsOf(sub, fn)
		if err != nil || len(all) == 0 {
			ok = false
			return nil
		}
		return all[len(all)-1:]
	}
	ok = true
	switch v.typ {
	case pb.BaseCommand_PRODUCER:
		return v.typ, authz.ActionProduce, last(1), ok
	case pb.BaseCommand_SUBSCRIBE:
		return v.typ, authz.ActionConsume, last(1), ok
	case pb.BaseCommand_LOOKUP, pb.BaseCommand_PARTITIONED_METADATA:
		return v.typ, authz.ActionLookup, last(1), ok
	case pb.BaseCommand_GET_SCHEMA:
		return v.typ, authz.ActionLookup, last(2), ok
	case pb.BaseCommand_GET_OR_CREATE_SCHEMA:
		return v.typ, authz.ActionProduce, last(2), ok
	case pb.BaseCommand_TC_CLIENT_CONNECT_REQUEST:
		topics, ok := coordinatorActedOn(sub, 2)
		return v.typ, authz.ActionLookup, topics, ok
	case pb.BaseCommand_NEW_TXN:
		topics, ok := coordinatorActedOn(sub, 3)
		return v.typ, authz.ActionLookup, topics, ok
	case pb.BaseCommand_ADD_PARTITION_TO_TXN:
		all, err := stringsOf(sub, 4)
		return v.typ, authz.ActionProduce, all, err == nil
	case pb.BaseCommand_ADD_SUBSCRIPTION_TO_TXN:
		subs, err := messagesOf(sub, 4)
		if err != nil {
			return v.typ, "", nil, false
		}
		for _, s := range subs {
			tt, err := stringsOf(s, 1)
			if err != nil || len(tt) == 0 {
				return v.typ, "", nil, false
			}
			topics = append(topics, tt[len(tt)-1])
		}
		return v.typ, authz.ActionConsume, topics, true
	}
	return v.typ, "", nil, true
}
