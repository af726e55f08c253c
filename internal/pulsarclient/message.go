package pulsarclient

import (
	"encoding/binary"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// MessageID is a message's position (wsapi.MessageID's fields, without the import). A
// message assembled from chunks has its last chunk's ledger and entry, and its first's.
type MessageID struct {
	Ledger, Entry           uint64
	Partition               int32 // -1: not a partition
	BatchIndex              int32 // -1: not in a batch
	BatchSize               int32
	Chunked                 bool
	FirstLedger, FirstEntry uint64 // the first chunk's, when Chunked
}

// entry is the id of the entry a message is in (a chunked message's last chunk).
func (m MessageID) entry() MessageID {
	m.BatchIndex, m.BatchSize = -1, 0
	m.Chunked, m.FirstLedger, m.FirstEntry = false, 0, 0
	return m
}

// Message is one message received.
type Message struct {
	ID              MessageID
	Topic           string // the partition's name for a partitioned topic
	Payload         []byte
	Properties      map[string]string
	PublishTime     uint64 // epoch milliseconds
	EventTime       uint64 // 0: none
	Key             string
	HasKey          bool
	RedeliveryCount uint32
	// Encryption is the metadata of a message delivered undecrypted (CryptoConsume).
	Encryption *pb.MessageMetadata
	size       int         // bytes counted against the consumer's queue
	carried    []bool      // a batch's slots this delivery of its entry carries (shared by them); nil: no batch
	chunks     []MessageID // the entries of a chunked message's chunks, first to last; nil: no chunks
}

// errUndecryptable marks an entry whose messages the proxy cannot read (they are encrypted).
var errUndecryptable = errors.New("message is encrypted")

// decodeEntry splits a MESSAGE's payload section into its messages: decompressed, a batch
// taken apart, discarded slots (compacted out, acknowledged in ack_set) left out. An
// encrypted entry is one message as it is when consume is set, errUndecryptable otherwise.
func (z *codecs) decodeEntry(m *pb.CommandMessage, payload []byte, partition int32, maxSize int, consume bool) ([]*Message, error) {
	md, data, err := readEntry(payload)
	if err != nil {
		return nil, err
	}
	return z.decodeMessages(m, md, data, partition, maxSize, consume)
}

// readEntry reads a MESSAGE's payload section: its metadata and its data.
func readEntry(payload []byte) (*pb.MessageMetadata, []byte, error) {
	p, err := frame.ParsePayload(payload)
	if err != nil {
		return nil, nil, err
	}
	md := new(pb.MessageMetadata)
	if err := proto.Unmarshal(p.Metadata, md); err != nil {
		return nil, nil, fmt.Errorf("message metadata: %w", err)
	}
	return md, p.Data, nil
}

// decodeMessages is decodeEntry once the metadata is read.
func (z *codecs) decodeMessages(m *pb.CommandMessage, md *pb.MessageMetadata, data []byte, partition int32, maxSize int, consume bool) ([]*Message, error) {
	id := MessageID{Ledger: m.GetMessageId().GetLedgerId(), Entry: m.GetMessageId().GetEntryId(), Partition: partition, BatchIndex: -1}
	base := Message{ID: id, PublishTime: md.GetPublishTime(), RedeliveryCount: m.GetRedeliveryCount()}
	if md.NumMessagesInBatch == nil || len(md.EncryptionKeys) > 0 {
		msg, err := z.single(base, md, data, maxSize, consume)
		if err != nil {
			return nil, err
		}
		return []*Message{msg}, nil
	}
	data, err := z.decompress(md.GetCompression(), data, md.GetUncompressedSize(), maxSize)
	if err != nil {
		return nil, err
	}
	return splitBatch(base, data, int(md.GetNumMessagesInBatch()), m.GetAckSet())
}

// single is a message that is no batch (or an encrypted one, which the proxy cannot take
// apart): decompressed, or as it is with its encryption metadata when consume is set.
func (z *codecs) single(base Message, md *pb.MessageMetadata, data []byte, maxSize int, consume bool) (*Message, error) {
	msg := base
	if len(md.EncryptionKeys) > 0 {
		if !consume {
			return nil, errUndecryptable
		}
		msg.Payload, msg.Encryption = data, md
	} else {
		var err error
		if msg.Payload, err = z.decompress(md.GetCompression(), data, md.GetUncompressedSize(), maxSize); err != nil {
			return nil, err
		}
	}
	msg.Properties = properties(md.GetProperties())
	msg.Key, msg.HasKey = md.GetPartitionKey(), md.PartitionKey != nil
	msg.EventTime = md.GetEventTime()
	msg.size = msg.charge()
	return &msg, nil
}

// maxBatchMessages bounds the messages of a batch the proxy takes apart. The count is the
// producer's word, and each message costs the proxy a few hundred bytes however small it is:
// a batch of empty messages would cost far more than its bytes. No client batches more.
const maxBatchMessages = 1 << 16

// minBatchSlot is the fewest bytes a message of a batch takes: its size (4 bytes) and its
// metadata, whose payload_size is required (2 bytes at least).
const minBatchSlot = 6

// splitBatch takes a batch's payload apart: n times [u32 size][SingleMessageMetadata][payload].
// A count the data cannot hold, or over maxBatchMessages, makes the entry unreadable before
// anything is allocated for it.
func splitBatch(base Message, data []byte, n int, ackSet []int64) ([]*Message, error) {
	if n < 1 || n > maxBatchMessages || n > len(data)/minBatchSlot {
		return nil, fmt.Errorf("a batch of %d messages in %d bytes", n, len(data))
	}
	out := make([]*Message, 0, n)
	carried := make([]bool, n)
	for i := 0; i < n; i++ {
		if len(data) < 4 {
			return nil, fmt.Errorf("batch of %d messages ends at message %d", n, i)
		}
		size := binary.BigEndian.Uint32(data)
		if uint64(size) > uint64(len(data)-4) {
			return nil, fmt.Errorf("batch message %d: metadata of %d bytes in %d", i, size, len(data)-4)
		}
		smd := new(pb.SingleMessageMetadata)
		if err := proto.Unmarshal(data[4:4+size], smd); err != nil {
			return nil, fmt.Errorf("batch message %d: %w", i, err)
		}
		data = data[4+size:]
		ps := smd.GetPayloadSize()
		if ps < 0 || int(ps) > len(data) {
			return nil, fmt.Errorf("batch message %d: payload of %d bytes in %d", i, ps, len(data))
		}
		payload := data[:ps:ps]
		data = data[ps:]
		if smd.GetCompactedOut() || acked(ackSet, i) {
			continue
		}
		carried[i] = true
		msg := base
		msg.ID.BatchIndex, msg.ID.BatchSize, msg.carried = int32(i), int32(n), carried
		msg.Payload, msg.Properties = payload, properties(smd.GetProperties())
		msg.Key, msg.HasKey = smd.GetPartitionKey(), smd.PartitionKey != nil
		msg.EventTime = smd.GetEventTime()
		msg.size = msg.charge()
		out = append(out, &msg)
	}
	return out, nil
}

// acked reports whether slot i of a batch is acknowledged already: the broker's ack_set
// has a bit set for each slot still to deliver.
func acked(ackSet []int64, i int) bool {
	if len(ackSet) == 0 {
		return false
	}
	w := i / 64
	return w >= len(ackSet) || ackSet[w]&(1<<(uint(i)%64)) == 0
}

// messageOverhead is what a message costs the proxy besides its bytes (the Message and its
// slices and map headers), counted against the consumer's queue with them.
const messageOverhead = 256

// charge is what the message holds at the proxy, counted against MaxQueuedBytes: its
// payload, key and properties, and its own overhead, so that many small messages are
// counted for what they cost.
func (m *Message) charge() int {
	n := messageOverhead + len(m.Payload) + len(m.Key)
	for k, v := range m.Properties {
		n += len(k) + len(v)
	}
	return n
}

// properties are a message's properties; nil without any (most messages), so that they
// cost no map.
func properties(kvs []*pb.KeyValue) map[string]string {
	if len(kvs) == 0 {
		return nil
	}
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = kv.GetValue()
	}
	return m
}
