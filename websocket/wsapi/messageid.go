package wsapi

import (
	"encoding/base64"
	"errors"
	"strconv"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// MessageID is a message's position: ledger and entry, the partition of a partitioned
// topic (-1 for none), and its index in a batch (-1 for none) of BatchSize messages. A
// message assembled from chunks has its last chunk's position and, Chunked, its first
// chunk's ledger and entry (Pulsar's ChunkMessageIdImpl).
type MessageID struct {
	Ledger, Entry           uint64
	Partition               int32
	BatchIndex              int32
	BatchSize               int32
	Chunked                 bool
	FirstLedger, FirstEntry uint64
}

// Encode is the id as clients see it: a MessageIdData in standard base64, with the fields
// a Java client writes (partition and batch index only when set, the batch size always).
func (m MessageID) Encode() string {
	b, _ := proto.Marshal(m.Data())
	return base64.StdEncoding.EncodeToString(b)
}

// Data is the id as the protocol carries it; a chunked message's as Pulsar 4.0.8's
// ChunkMessageIdImpl writes it: the last chunk's id with the first chunk's in
// first_chunk_message_id, both with their partition and a batch size of 0.
func (m MessageID) Data() *pb.MessageIdData {
	d := &pb.MessageIdData{LedgerId: proto.Uint64(m.Ledger), EntryId: proto.Uint64(m.Entry)}
	if m.Partition >= 0 {
		d.Partition = proto.Int32(m.Partition)
	}
	if m.BatchIndex >= 0 {
		d.BatchIndex = proto.Int32(m.BatchIndex)
	}
	if m.BatchSize >= 0 {
		d.BatchSize = proto.Int32(m.BatchSize) // a Java client writes 0 for a message not in a batch
	}
	if m.Chunked {
		first := MessageID{Ledger: m.FirstLedger, Entry: m.FirstEntry, Partition: m.Partition, BatchIndex: -1}
		d.FirstChunkMessageId = first.Data()
	}
	return d
}

// String is the id as Pulsar's MessageIdImpl prints it (ledger:entry:partition, and the
// batch index of a batched message; a chunked message's first chunk, then ';' and its last,
// as ChunkMessageIdImpl prints it): a dead-lettered message's ORIGIN_MESSAGE_ID.
func (m MessageID) String() string {
	s := strconv.FormatUint(m.Ledger, 10) + ":" + strconv.FormatUint(m.Entry, 10) + ":" + strconv.Itoa(int(m.Partition))
	if m.BatchIndex >= 0 {
		s += ":" + strconv.Itoa(int(m.BatchIndex))
	}
	if m.Chunked {
		s = strconv.FormatUint(m.FirstLedger, 10) + ":" + strconv.FormatUint(m.FirstEntry, 10) + ":" + strconv.Itoa(int(m.Partition)) + ";" + s
	}
	return s
}

// WholeEntry is the id of the whole entry (the batch a message is in, a chunked message's
// last chunk).
func (m MessageID) WholeEntry() MessageID {
	m.BatchIndex, m.BatchSize = -1, 0
	m.Chunked, m.FirstLedger, m.FirstEntry = false, 0, 0
	return m
}

// FromData reads a MessageIdData (with first_chunk_message_id: a chunked message's).
func FromData(d *pb.MessageIdData) MessageID {
	m := MessageID{Ledger: d.GetLedgerId(), Entry: d.GetEntryId(), Partition: d.GetPartition(),
		BatchIndex: d.GetBatchIndex(), BatchSize: d.GetBatchSize()}
	if f := d.GetFirstChunkMessageId(); f != nil {
		m.Chunked, m.FirstLedger, m.FirstEntry = true, f.GetLedgerId(), f.GetEntryId()
	}
	return m
}

// ErrNotMessageID: base64 that is not a MessageIdData.
var ErrNotMessageID = errors.New("not a message id (a MessageIdData in base64)")

// ErrBase64: not base64.
var ErrBase64 = errors.New("not base64")

// DecodeMessageID reads an id a client sends back: base64 (standard alphabet, padding
// optional, as Java's decoder takes it) of a MessageIdData.
func DecodeMessageID(s string) (MessageID, error) {
	b, err := DecodeBase64(s)
	if err != nil {
		return MessageID{}, ErrBase64
	}
	var d pb.MessageIdData
	if err := proto.Unmarshal(b, &d); err != nil {
		return MessageID{}, ErrNotMessageID
	}
	return FromData(&d), nil
}

// DecodeBase64 decodes standard base64 as Java's Base64.getDecoder does: padding may be
// left out, but where present it must be right.
func DecodeBase64(s string) ([]byte, error) {
	if len(s)%4 == 0 {
		return base64.StdEncoding.DecodeString(s)
	}
	return base64.RawStdEncoding.DecodeString(s)
}
