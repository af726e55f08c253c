package mux

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/fastwire"
)

// The hot path rewrites ids in the command's bytes without decoding it: the command's own
// sub-message is found, its id fields (varints at known numbers) are replaced, and the
// sub-message's length is written anew; every other byte is copied as it came. Anything
// unusual (a sub-message or id given twice, an id of another wire type, bytes protowire
// cannot parse) takes the decoding path, which re-encodes the command canonically.

// errNotPlain: the command's bytes are not in the one plain form the hot path rewrites.
var errNotPlain = errors.New("mux: command not in plain form")

// idNumbers are one command type's id fields by protobuf number, in its table's order, and
// which of them the protocol requires.
type idNumbers struct {
	nums     []protowire.Number
	required [maxIDs]bool
}

// commandIDs is one command type's entry of a table, as the data path looks it up: its id
// fields and their numbers.
type commandIDs struct {
	fields []idField
	nums   idNumbers
}

// typeSlots bounds the command types the tables index (BaseCommand.Type's values are small).
const typeSlots = 128

// idTable is a table of commands by type: a slice index, not a map lookup, for every frame.
type idTable [typeSlots]*commandIDs

// get is t's entry; nil: t is not in the table.
func (tb *idTable) get(t pb.BaseCommand_Type) *commandIDs {
	if t < 0 || int(t) >= typeSlots {
		return nil
	}
	return tb[t]
}

// clientTable and brokerTable are clientCommands and brokerCommands as the data path reads them.
var clientTable, brokerTable = tableOf(clientCommands), tableOf(brokerCommands)

func tableOf(table map[pb.BaseCommand_Type][]idField) *idTable {
	base := (&pb.BaseCommand{}).ProtoReflect().Descriptor().Fields()
	out := &idTable{}
	for t, fields := range table {
		if len(fields) > maxIDs || int(t) >= typeSlots {
			panic(fmt.Sprintf("mux: %v has more than %d id fields or a type beyond %d", t, maxIDs, typeSlots))
		}
		sub := base.ByNumber(protoreflect.FieldNumber(t)).Message().Fields()
		e := &commandIDs{fields: fields}
		for i, fl := range fields {
			fd := sub.ByName(fl.name)
			e.nums.nums = append(e.nums.nums, fd.Number())
			e.nums.required[i] = fd.Cardinality() == protoreflect.Required
		}
		out[t] = e
	}
	return out
}

// wireIDs are the id fields of one command located in its bytes, their values in ids for
// the mapping.
type wireIDs struct {
	raw             []byte
	lenAt, sub, end int // the sub-message's length varint, its bytes raw[sub:end]
	nums            []protowire.Number
	at, stop        [maxIDs]int // each id's value bytes raw[at:stop]; at 0: absent
	orig            [maxIDs]uint64
	ids             idSet
}

// plainTag reads a field's tag as a broker reads it, or n < 0. A broker reads a tag's low 32
// bits only: a tag whose varint is wider (a field number over protobuf's 2^29-1, which
// protowire does not refuse) is another field there (1<<32|8 is field 1, the id of most
// commands), so it is not plain; nor are groups, which a broker's parser throws on.
func plainTag(b []byte) (protowire.Number, protowire.Type, int) {
	num, typ, n := fastwire.ConsumeTag(b)
	if n < 0 || num > protowire.MaxValidNumber || typ == protowire.StartGroupType || typ == protowire.EndGroupType {
		return 0, 0, -1
	}
	return num, typ, n
}

// locate finds in raw the sub-message of type t and the id fields f in it (w is to be
// zero: filled in place, a wireIDs is some 200 bytes). A command without one of its
// required ids is not plain: the decoding path refuses it (a broker's parser throws on a
// missing required field, and closes the shared connection).
func (w *wireIDs) locate(raw []byte, t pb.BaseCommand_Type, f idNumbers) error {
	w.raw, w.nums = raw, f.nums
	found := false
	for b, off := raw, 0; len(b) > 0; {
		num, typ, n := plainTag(b)
		if n < 0 {
			return errNotPlain
		}
		if num == protowire.Number(t) {
			if typ != protowire.BytesType || found {
				return errNotPlain
			}
			v, m := fastwire.ConsumeBytes(b[n:])
			if m < 0 {
				return errNotPlain
			}
			found = true
			w.lenAt, w.end = off+n, off+n+m
			w.sub = w.end - len(v)
		}
		m := fastwire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return errNotPlain
		}
		b, off = b[n+m:], off+n+m
	}
	if !found {
		return ErrNoSubMessage
	}
	if err := w.locateIDs(); err != nil {
		return err
	}
	for i := range w.nums {
		if f.required[i] && w.at[i] == 0 {
			return errNotPlain
		}
	}
	return nil
}

func (w *wireIDs) locateIDs() error {
	for b, off := w.raw[w.sub:w.end], w.sub; len(b) > 0; {
		num, typ, n := plainTag(b)
		if n < 0 {
			return errNotPlain
		}
		m := fastwire.ConsumeFieldValue(num, typ, b[n:])
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
			v, _ := fastwire.ConsumeVarint(b[n:])
			w.orig[i], w.ids.vals[i], w.ids.has[i] = v, v, true
			w.at[i], w.stop[i] = off+n, off+n+m
		}
		b, off = b[n+m:], off+n+m
	}
	return nil
}

// appendTo appends the command with the ids as mapped to dst. Where every changed id's
// value takes as many bytes as the client's encoding of it did, the command's bytes are
// copied and the ids overwritten in place (no length changes); otherwise the sub-message is
// put together anew around the ids, its length written anew. Every other byte is copied as
// it came either way.
func (w *wireIDs) appendTo(dst []byte) []byte {
	grow, changed := 0, false
	for i := range w.nums {
		if w.at[i] == 0 || w.ids.vals[i] == w.orig[i] {
			continue
		}
		changed = true
		grow += protowire.SizeVarint(w.ids.vals[i]) - (w.stop[i] - w.at[i])
	}
	base := len(dst)
	if !changed || grow == 0 && w.sameWidths() {
		dst = append(dst, w.raw...)
		for i := range w.nums {
			if w.at[i] != 0 && w.ids.vals[i] != w.orig[i] {
				protowire.AppendVarint(dst[base+w.at[i]:base+w.at[i]], w.ids.vals[i])
			}
		}
		return dst
	}
	order := w.order()
	dst = append(dst, w.raw[:w.lenAt]...)
	dst = protowire.AppendVarint(dst, uint64(w.end-w.sub+grow))
	from := w.sub
	for _, i := range order {
		if i < 0 {
			break
		}
		dst = append(dst, w.raw[from:w.at[i]]...)
		dst = protowire.AppendVarint(dst, w.ids.vals[i])
		from = w.stop[i]
	}
	dst = append(dst, w.raw[from:w.end]...)
	return append(dst, w.raw[w.end:]...)
}

// sameWidths: every changed id's new value takes exactly the bytes of its old encoding.
func (w *wireIDs) sameWidths() bool {
	for i := range w.nums {
		if w.at[i] != 0 && w.ids.vals[i] != w.orig[i] && protowire.SizeVarint(w.ids.vals[i]) != w.stop[i]-w.at[i] {
			return false
		}
	}
	return true
}

// order is the present ids' indexes in the order they appear in the bytes, then -1s.
func (w *wireIDs) order() [maxIDs]int {
	order := [maxIDs]int{-1, -1, -1, -1}
	n := 0
	for i := range w.nums {
		if w.at[i] == 0 {
			continue
		}
		order[n] = i
		for j := n; j > 0 && w.at[order[j]] < w.at[order[j-1]]; j-- {
			order[j], order[j-1] = order[j-1], order[j]
		}
		n++
	}
	return order
}

// bytes is the command with the ids as mapped: raw itself when nothing changed.
func (w *wireIDs) bytes() []byte {
	for i := range w.nums {
		if w.at[i] != 0 && w.ids.vals[i] != w.orig[i] {
			return w.appendTo(nil)
		}
	}
	return w.raw
}

// reflectIDs are the id fields of a decoded command, their values in ids for the mapping
// (apply writes them back).
type reflectIDs struct {
	sub    protoreflect.Message
	fields [maxIDs]protoreflect.FieldDescriptor
	ids    idSet
}

func newReflectIDs(cmd *pb.BaseCommand, table []idField) (*reflectIDs, error) {
	sub, err := subMessage(cmd)
	if err != nil {
		return nil, err
	}
	r := &reflectIDs{sub: sub}
	for i, fl := range table {
		fd := sub.Descriptor().Fields().ByName(fl.name)
		r.fields[i] = fd
		if sub.Has(fd) {
			r.ids.vals[i], r.ids.has[i] = sub.Get(fd).Uint(), true
		}
	}
	return r, nil
}

// apply sets the command's id fields to the mapped values.
func (r *reflectIDs) apply() {
	for i, fd := range r.fields {
		if fd != nil && r.ids.has[i] {
			r.sub.Set(fd, protoreflect.ValueOfUint64(r.ids.vals[i]))
		}
	}
}

// UpBytes maps a client's command given as bytes and returns the bytes to send (a new slice
// when ids changed, command itself otherwise). Errors as Up's, and frame.ErrMalformed.
func (m *Mapper) UpBytes(c *Client, command []byte) ([]byte, error) {
	t, err := frame.PeekType(command)
	if err != nil {
		return nil, err
	}
	e := clientTable.get(t)
	if e == nil {
		return nil, ErrNotAllowed
	}
	var w wireIDs
	if err := w.locate(command, t, e.nums); err == nil {
		if err := m.up(c, t, e.fields, &w.ids); err != nil {
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

// AppendUp maps a client's command as UpBytes does and appends the bytes to send to dst:
// without allocating when the command is in plain form (see appendTo).
func (m *Mapper) AppendUp(dst []byte, c *Client, command []byte) ([]byte, error) {
	t, err := frame.PeekType(command)
	if err != nil {
		return dst, err
	}
	e := clientTable.get(t)
	if e == nil {
		return dst, ErrNotAllowed
	}
	var w wireIDs
	if err := w.locate(command, t, e.nums); err == nil {
		if err := m.up(c, t, e.fields, &w.ids); err != nil {
			return dst, err
		}
		return w.appendTo(dst), nil
	}
	out, err := m.UpBytes(c, command) // the decoding path
	if err != nil {
		return dst, err
	}
	return append(dst, out...), nil
}

// DownBytes maps a broker's command given as bytes back for its client, as Down.
func (m *Mapper) DownBytes(command []byte) ([]byte, *Client, error) {
	return m.AppendDown(nil, command)
}

// AppendDown maps a broker's command back for its client, as Down, and appends the client's
// bytes to dst: without allocating when the command is in plain form.
func (m *Mapper) AppendDown(dst, command []byte) ([]byte, *Client, error) {
	t, err := frame.PeekType(command)
	if err != nil {
		return dst, nil, err
	}
	return m.appendDown(dst, t, command)
}

// appendDown is AppendDown of a command whose type was read already (frame.PeekType).
func (m *Mapper) appendDown(dst []byte, t pb.BaseCommand_Type, command []byte) ([]byte, *Client, error) {
	e := brokerTable.get(t)
	if e == nil {
		return dst, nil, ErrNotAllowed
	}
	// PRODUCER_SUCCESS (producer_ready) and TOPIC_MIGRATED (resource_type) need another field
	// of the command: decoded.
	if t != pb.BaseCommand_PRODUCER_SUCCESS && t != pb.BaseCommand_TOPIC_MIGRATED {
		var w wireIDs
		if err := w.locate(command, t, e.nums); err == nil {
			owner, err := m.down(t, e.fields, &w.ids, false, producerID)
			if err != nil {
				return dst, nil, err
			}
			return w.appendTo(dst), owner, nil
		}
	}
	cmd, err := frame.Decode(command)
	if err != nil {
		return dst, nil, err
	}
	owner, err := m.Down(cmd)
	if err != nil {
		return dst, nil, err
	}
	out, err := marshalCommand(cmd)
	return append(dst, out...), owner, err
}
