package pulsarclient

import (
	"encoding/binary"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// MessageID is a message's position (wsapi.MessageID's fields, without the import).
type MessageID struct {
	Ledger, Entry uint64
	Partition     int32 // -1: not a partition
	BatchIndex    int32 // -1: not in a batch
	BatchSize     int32
}

// entry is the id of the entry a message is in.
func (m MessageID) entry() MessageID {
	m.BatchIndex, m.BatchSize = -1, 0
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
	size       int // bytes counted against the consumer's queue
}

// errUndecryptable marks an entry whose messages the proxy cannot read (they are encrypted).
var errUndecryptable = errors.New("message is encrypted")

// decodeEntry splits a MESSAGE's payload section into its messages: decompressed, a batch
// taken apart, discarded slots (compacted out, acknowledged in ack_set) left out. An
// encrypted entry is one message as it is when consume is set, errUndecryptable otherwise.
func (z *codecs) decodeEntry(m *pb.CommandMessage, payload []byte, partition int32, maxSize int, consume bool) ([]*Message, error) {
	p, err := frame.ParsePayload(payload)
	if err != nil {
		return nil, err
	}
	md := new(pb.MessageMetadata)
	if err := proto.Unmarshal(p.Metadata, md); err != nil {
		return nil, fmt.Errorf("message metadata: %w", err)
	}
	id := MessageID{Ledger: m.GetMessageId().GetLedgerId(), Entry: m.GetMessageId().GetEntryId(), Partition: partition, BatchIndex: -1}
	base := Message{ID: id, PublishTime: md.GetPublishTime(), RedeliveryCount: m.GetRedeliveryCount()}
	if len(md.EncryptionKeys) > 0 {
		if !consume {
			return nil, errUndecryptable
		}
		msg := base
		msg.Payload, msg.Encryption = p.Data, md
		msg.Properties = properties(md.GetProperties())
		msg.Key, msg.HasKey = md.GetPartitionKey(), md.PartitionKey != nil
		msg.EventTime, msg.size = md.GetEventTime(), len(p.Data)
		return []*Message{&msg}, nil
	}
	data, err := z.decompress(md.GetCompression(), p.Data, md.GetUncompressedSize(), maxSize)
	if err != nil {
		return nil, err
	}
	if md.NumMessagesInBatch == nil {
		msg := base
		msg.Payload, msg.Properties = data, properties(md.GetProperties())
		msg.Key, msg.HasKey = md.GetPartitionKey(), md.PartitionKey != nil
		msg.EventTime, msg.size = md.GetEventTime(), len(data)
		return []*Message{&msg}, nil
	}
	return splitBatch(base, data, int(md.GetNumMessagesInBatch()), m.GetAckSet())
}

// splitBatch takes a batch's payload apart: n times [u32 size][SingleMessageMetadata][payload].
func splitBatch(base Message, data []byte, n int, ackSet []int64) ([]*Message, error) {
	out := make([]*Message, 0, n)
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
		msg := base
		msg.ID.BatchIndex, msg.ID.BatchSize = int32(i), int32(n)
		msg.Payload, msg.Properties = payload, properties(smd.GetProperties())
		msg.Key, msg.HasKey = smd.GetPartitionKey(), smd.PartitionKey != nil
		msg.EventTime, msg.size = smd.GetEventTime(), len(payload)
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

func properties(kvs []*pb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = kv.GetValue()
	}
	return m
}
