package pulsarclient

import (
	"encoding/binary"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// batchBuf is a batch being filled: each message's SingleMessageMetadata and payload, in
// the layout of a batch ([u32 size][metadata][payload] each).
type batchBuf struct {
	data  []byte
	done  []SendResult
	first uint64 // sequence id of the first message
}

func (pp *partProducer) send(m *OutMessage, done SendResult) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if pp.err != nil || pp.closed {
		err := pp.err
		if err == nil {
			err = ErrClosed
		}
		go done(MessageID{}, err)
		return
	}
	if pp.p.opts.Batching && m.DeliverAt == 0 {
		pp.addToBatchLocked(m, done)
		return
	}
	pp.flushLocked()
	seq := pp.nextSeq
	pp.nextSeq++
	b, err := pp.encodeLocked(seq, seq, 0, pp.metadataLocked(m, seq), m.Payload)
	if err != nil {
		go done(MessageID{}, err)
		return
	}
	pp.enqueueLocked(&pendingSend{seq: seq, frame: b, done: []SendResult{done}})
}

// metadataLocked is a message's metadata, batch fields aside.
func (pp *partProducer) metadataLocked(m *OutMessage, seq uint64) *pb.MessageMetadata {
	md := &pb.MessageMetadata{ProducerName: proto.String(pp.name), SequenceId: proto.Uint64(seq),
		PublishTime: proto.Uint64(uint64(time.Now().UnixMilli())), ReplicateTo: m.ReplicationClusters}
	md.Properties = keyValues(m.Properties)
	if m.Key != nil {
		md.PartitionKey = proto.String(*m.Key)
	}
	if m.EventTime > 0 {
		md.EventTime = proto.Uint64(m.EventTime)
	}
	if m.DeliverAt > 0 {
		md.DeliverAtTime = proto.Int64(m.DeliverAt)
	}
	if keys := pp.p.opts.EncryptionKeys; len(keys) > 0 {
		md.EncryptionKeys, md.EncryptionParam = keys, m.EncryptionParam
		if m.Compression != nil && m.UncompressedSize != nil {
			md.Compression, md.UncompressedSize = m.Compression, m.UncompressedSize
		}
	}
	return md
}

// encodeLocked compresses the payload as configured and encodes the SEND frame (n messages
// of a batch; 0: not a batch).
func (pp *partProducer) encodeLocked(seq, highest uint64, n int, md *pb.MessageMetadata, payload []byte) ([]byte, error) {
	if c := pp.p.opts.Compression; c != pb.CompressionType_NONE && len(pp.p.opts.EncryptionKeys) == 0 {
		md.Compression, md.UncompressedSize = c.Enum(), proto.Uint32(uint32(len(payload)))
		var err error
		if payload, err = pp.p.c.codecs.compress(c, payload); err != nil {
			return nil, err
		}
	}
	limit := 5 << 20
	if pp.cn != nil {
		if m := pp.cn.nc.Connected.GetMaxMessageSize(); m > 0 {
			limit = int(m)
		}
	}
	if len(payload) > limit {
		return nil, fmt.Errorf("the message is %d bytes, over the broker's maxMessageSize of %d", len(payload), limit)
	}
	cmd := &pb.CommandSend{ProducerId: proto.Uint64(pp.id), SequenceId: proto.Uint64(seq)}
	if n > 0 {
		cmd.NumMessages = proto.Int32(int32(n))
		cmd.HighestSequenceId = proto.Uint64(highest)
		md.NumMessagesInBatch = proto.Int32(int32(n))
		md.HighestSequenceId = proto.Uint64(highest)
	}
	return frame.AppendPayloadCommand(nil, &pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: cmd}, nil, md, payload)
}

// enqueueLocked keeps a SEND until its receipt and writes it when connected.
func (pp *partProducer) enqueueLocked(s *pendingSend) {
	if t := pp.p.opts.SendTimeout; t > 0 {
		s.deadline = time.Now().Add(t)
		if len(pp.pending) == 0 {
			pp.armTimeoutLocked(t)
		}
	}
	pp.pending = append(pp.pending, s)
	if pp.cn != nil {
		pp.cn.writeFrame(s.frame) // a failure closes the connection; the frame goes again
	}
}

func (pp *partProducer) addToBatchLocked(m *OutMessage, done SendResult) {
	b := &pp.batch
	seq := pp.nextSeq
	pp.nextSeq++
	if len(b.done) == 0 {
		b.first = seq
		if d := pp.p.opts.BatchMaxDelay; d > 0 {
			if pp.batchT == nil {
				pp.batchT = time.AfterFunc(d, pp.flushOnTimer)
			} else {
				pp.batchT.Reset(d)
			}
		}
	}
	smd := &pb.SingleMessageMetadata{PayloadSize: proto.Int32(int32(len(m.Payload))), SequenceId: proto.Uint64(seq),
		Properties: keyValues(m.Properties)}
	if m.Key != nil {
		smd.PartitionKey = proto.String(*m.Key)
	}
	if m.EventTime > 0 {
		smd.EventTime = proto.Uint64(m.EventTime)
	}
	at := len(b.data)
	b.data = append(b.data, 0, 0, 0, 0)
	b.data, _ = proto.MarshalOptions{}.MarshalAppend(b.data, smd)
	binary.BigEndian.PutUint32(b.data[at:], uint32(len(b.data)-at-4))
	b.data = append(b.data, m.Payload...)
	b.done = append(b.done, done)
	if len(b.done) >= pp.p.opts.BatchMaxMessages || len(b.data) >= batchMaxBytes || pp.p.opts.BatchMaxDelay <= 0 {
		pp.flushLocked()
	}
}

func (pp *partProducer) flushOnTimer() {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if !pp.closed {
		pp.flushLocked()
	}
}

// flushLocked sends the batch being filled, if any.
func (pp *partProducer) flushLocked() {
	b := pp.batch
	if len(b.done) == 0 {
		return
	}
	pp.batch = batchBuf{}
	n := len(b.done)
	highest := b.first + uint64(n) - 1
	md := &pb.MessageMetadata{ProducerName: proto.String(pp.name), SequenceId: proto.Uint64(b.first),
		PublishTime: proto.Uint64(uint64(time.Now().UnixMilli()))}
	frameBytes, err := pp.encodeLocked(b.first, highest, n, md, b.data)
	if err != nil {
		for _, d := range b.done {
			go d(MessageID{}, err)
		}
		return
	}
	pp.enqueueLocked(&pendingSend{seq: b.first, frame: frameBytes, done: b.done})
}

// receipt: the broker stored the oldest pending SEND.
func (pp *partProducer) receipt(r *pb.CommandSendReceipt) {
	pp.mu.Lock()
	if len(pp.pending) == 0 || r.GetSequenceId() < pp.pending[0].seq {
		pp.mu.Unlock()
		return // a receipt for a send that timed out, or one sent twice
	}
	head := pp.pending[0]
	if r.GetSequenceId() > head.seq {
		cn := pp.cn
		pp.mu.Unlock()
		if cn != nil { // out of step with the broker: start over on a new connection
			cn.close(fmt.Errorf("broker %s acknowledged sequence id %d, expected %d", cn.addr, r.GetSequenceId(), head.seq))
		}
		return
	}
	pp.pending[0] = nil
	pp.pending = pp.pending[1:]
	if len(pp.pending) > 0 && pp.timeoutT != nil {
		pp.armTimeoutLocked(time.Until(pp.pending[0].deadline))
	}
	pp.mu.Unlock()
	id := MessageID{Ledger: r.GetMessageId().GetLedgerId(), Entry: r.GetMessageId().GetEntryId(), Partition: pp.partition, BatchIndex: -1}
	for i, d := range head.done {
		if len(head.done) > 1 || pp.p.opts.Batching {
			id.BatchIndex, id.BatchSize = int32(i), int32(len(head.done))
		}
		d(id, nil)
	}
}

// sendError: a checksum error fails that message; anything else, as Pulsar's clients do,
// closes the connection so the producer comes back and sends again.
func (pp *partProducer) sendError(e *pb.CommandSendError) {
	pp.mu.Lock()
	cn := pp.cn
	if e.GetError() == pb.ServerError_ChecksumError && len(pp.pending) > 0 && pp.pending[0].seq == e.GetSequenceId() {
		head := pp.pending[0]
		pp.pending = pp.pending[1:]
		pp.mu.Unlock()
		head.fail(&Error{Code: e.GetError(), Message: e.GetMessage()})
		return
	}
	pp.mu.Unlock()
	if cn != nil {
		cn.close(fmt.Errorf("broker %s: send error %v: %s", cn.addr, e.GetError(), e.GetMessage()))
	}
}

// armTimeoutLocked fires the send timeout after d.
func (pp *partProducer) armTimeoutLocked(d time.Duration) {
	if pp.timeoutT == nil {
		pp.timeoutT = time.AfterFunc(d, pp.expire)
		return
	}
	pp.timeoutT.Reset(d)
}

// expire fails the messages past their send timeout.
func (pp *partProducer) expire() {
	now := time.Now()
	pp.mu.Lock()
	var expired []*pendingSend
	for len(pp.pending) > 0 && !pp.pending[0].deadline.After(now) {
		expired = append(expired, pp.pending[0])
		pp.pending = pp.pending[1:]
	}
	if len(pp.pending) > 0 {
		pp.armTimeoutLocked(time.Until(pp.pending[0].deadline))
	}
	pp.mu.Unlock()
	for _, s := range expired {
		s.fail(ErrSendTimeout)
	}
}

func keyValues(m map[string]string) []*pb.KeyValue {
	if len(m) == 0 {
		return nil
	}
	out := make([]*pb.KeyValue, 0, len(m))
	for k, v := range m {
		out = append(out, &pb.KeyValue{Key: proto.String(k), Value: proto.String(v)})
	}
	return out
}
