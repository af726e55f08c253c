package mux

import (
	"errors"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// The hot path rewrites ids in the command's bytes without decoding it: the command's own
// sub-message is found, its id fields (varints at known numbers) are replaced, and the
// sub-message's length is written anew; every other byte is copied as it came. Anything
// unusual (a sub-message or id given twice, an id of another wire type, bytes protowire
// cannot parse) takes the decoding path, which re-encodes the command canonically.

// errNotPlain: the command's bytes are not in the one plain form the hot path rewrites.
var errNotPlain = errors.New("mux: command not in plain form")

// fieldNumbers are the protobuf numbers of each table's id fields, by command type.
var clientNumbers, brokerNumbers = numbersOf(clientCommands), numbersOf(brokerCommands)

func numbersOf(table map[pb.BaseCommand_Type][]idField) map[pb.BaseCommand_Type][]protowire.Number {
	base := (&pb.BaseCommand{}).ProtoReflect().Descriptor().Fields()
	out := map[pb.BaseCommand_Type][]protowire.Number{}
	for t, fields := range table {
		sub := base.ByNumber(protoreflect.FieldNumber(t)).Message().Fields()
		for _, fl := range fields {
			out[t] = append(out[t], sub.ByName(fl.name).Number())
		}
	}
	return out
}

// wireIDs are the id fields of one command located in its bytes; it serves the mapping as
// reflectIDs does.
type wireIDs struct {
	raw             []byte
	lenAt, sub, end int // the sub-message's length varint, its bytes raw[sub:end]
	nums            []protowire.Number
	at, stop        [4]int // each id's value bytes raw[at:stop]; at 0: absent
	vals            [4]uint64
	changed         bool
}

// locate finds the sub-message of type t and the id fields nums in it.
func locate(raw []byte, t pb.BaseCommand_Type, nums []protowire.Number) (*wireIDs, error) {
	w := &wireIDs{raw: raw, nums: nums}
	found := false
	for b, off := raw, 0; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ == protowire.StartGroupType || typ == protowire.EndGroupType {
			return nil, errNotPlain
		}
		if num == protowire.Number(t) {
			if typ != protowire.BytesType || found {
				return nil, errNotPlain
			}
			v, m := protowire.ConsumeBytes(b[n:])
			if m < 0 {
				return nil, errNotPlain
			}
			found = true
			w.lenAt, w.end = off+n, off+n+m
			w.sub = w.end - len(v)
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return nil, errNotPlain
		}
		b, off = b[n+m:], off+n+m
	}
	if !found {
		return nil, ErrNoSubMessage
	}
	return w, w.locateIDs()
}

func (w *wireIDs) locateIDs() error {
	for b, off := w.raw[w.sub:w.end], w.sub; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ == protowire.StartGroupType || typ == protowire.EndGroupType {
			return errNotPlain
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return errNotPlain
		}
		for i, want := range w.nums {
			if num != want {
				continue
			}
			if typ != protowire.VarintType || w.at[i] != 0 {
				return errNotPlain
			}
			w.vals[i], _ = protowire.ConsumeVarint(b[n:])
			w.at[i], w.stop[i] = off+n, off+n+m
		}
		b, off = b[n+m:], off+n+m
	}
	return nil
}

func (w *wireIDs) get(i int) (uint64, bool) { return w.vals[i], w.at[i] != 0 }

func (w *wireIDs) set(i int, v uint64) {
	if w.vals[i] != v {
		w.vals[i], w.changed = v, true
	}
}

// bytes is the command with the ids as set: raw itself when nothing changed.
func (w *wireIDs) bytes() []byte {
	if !w.changed {
		return w.raw
	}
	// The ids appear in the sub-message in some order; write the pieces in that order.
	order := make([]int, 0, len(w.nums))
	for i := range w.nums {
		if w.at[i] != 0 {
			order = append(order, i)
		}
	}
	for i := 1; i < len(order); i++ {
		for j := i; j > 0 && w.at[order[j]] < w.at[order[j-1]]; j-- {
			order[j], order[j-1] = order[j-1], order[j]
		}
	}
	sub := make([]byte, 0, w.end-w.sub+10*len(order))
	from := w.sub
	for _, i := range order {
		sub = append(sub, w.raw[from:w.at[i]]...)
		sub = protowire.AppendVarint(sub, w.vals[i])
		from = w.stop[i]
	}
	sub = append(sub, w.raw[from:w.end]...)
	out := make([]byte, 0, len(w.raw)+len(sub)-(w.end-w.sub)+10)
	out = append(out, w.raw[:w.lenAt]...)
	out = protowire.AppendVarint(out, uint64(len(sub)))
	out = append(out, sub...)
	return append(out, w.raw[w.end:]...)
}

// reflectIDs serves the mapping from a decoded command.
type reflectIDs struct {
	sub    protoreflect.Message
	fields []protoreflect.FieldDescriptor
}

func newReflectIDs(cmd *pb.BaseCommand, table []idField) (*reflectIDs, error) {
	sub, err := subMessage(cmd)
	if err != nil {
		return nil, err
	}
	r := &reflectIDs{sub: sub}
	for _, fl := range table {
		r.fields = append(r.fields, sub.Descriptor().Fields().ByName(fl.name))
	}
	return r, nil
}

func (r *reflectIDs) get(i int) (uint64, bool) {
	if !r.sub.Has(r.fields[i]) {
		return 0, false
	}
	return r.sub.Get(r.fields[i]).Uint(), true
}

func (r *reflectIDs) set(i int, v uint64) { r.sub.Set(r.fields[i], protoreflect.ValueOfUint64(v)) }

// UpBytes maps a client's command given as bytes and returns the bytes to send (a new slice
// when ids changed, command itself otherwise). Errors as Up's, and frame.ErrMalformed.
func (m *Mapper) UpBytes(c *Client, command []byte) ([]byte, error) {
	t, err := frame.PeekType(command)
	if err != nil {
		return nil, err
	}
	table, ok := clientCommands[t]
	if !ok {
		return nil, ErrNotAllowed
	}
	if w, err := locate(command, t, clientNumbers[t]); err == nil {
		if err := m.up(c, t, table, w); err != nil {
			return nil, err
		}
		return w.bytes(), nil
	}
	cmd, err := frame.Decode(command) // the decoding path: re-encoded canonically
	if err != nil {
		return nil, err
	}
	if err := m.Up(c, cmd); err != nil {
		return nil, err
	}
	return marshalCommand(cmd)
}

// DownBytes maps a broker's command given as bytes back for its client, as Down.
func (m *Mapper) DownBytes(command []byte) ([]byte, *Client, error) {
	t, err := frame.PeekType(command)
	if err != nil {
		return nil, nil, err
	}
	table, ok := brokerCommands[t]
	if !ok {
		return nil, nil, ErrNotAllowed
	}
	// PRODUCER_SUCCESS (producer_ready) and TOPIC_MIGRATED (resource_type) need another field
	// of the command: decoded.
	if t != pb.BaseCommand_PRODUCER_SUCCESS && t != pb.BaseCommand_TOPIC_MIGRATED {
		if w, err := locate(command, t, brokerNumbers[t]); err == nil {
			owner, err := m.down(t, table, w, false, producerID)
			if err != nil {
				return nil, nil, err
			}
			return w.bytes(), owner, nil
		}
	}
	cmd, err := frame.Decode(command)
	if err != nil {
		return nil, nil, err
	}
	owner, err := m.Down(cmd)
	if err != nil {
		return nil, nil, err
	}
	out, err := marshalCommand(cmd)
	return out, owner, err
}
