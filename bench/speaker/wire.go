package speaker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// The hot frames of the benchmark (SEND, SEND_RECEIPT, MESSAGE, FLOW, ACK) are encoded and
// read here with protowire, field by field, so that neither the speaker nor the load
// generator spends its one CPU on protobuf reflection: the path under test must be the
// bottleneck. Field numbers are those of frame/pb (a BaseCommand's sub-message has the field
// number of its type); the tests check every encoder against frame.Decode.

// Field numbers of the sub-messages written here.
const (
	fieldType = 1 // BaseCommand.type

	sendProducerID  = 1 // CommandSend
	sendSequenceID  = 2
	sendNumMessages = 3

	receiptProducerID = 1 // CommandSendReceipt
	receiptSequenceID = 2
	receiptMessageID  = 3

	messageConsumerID = 1 // CommandMessage
	messageMessageID  = 2

	flowConsumerID = 1 // CommandFlow
	flowPermits    = 2

	ackConsumerID = 1 // CommandAck
	ackType       = 2
	ackMessageID  = 3

	idLedger = 1 // MessageIdData
	idEntry  = 2

	ackCumulative = 1 // CommandAck.AckType
)

func sizeVarintField(num protowire.Number, v uint64) int {
	return protowire.SizeTag(num) + protowire.SizeVarint(v)
}

func sizeBytesField(num protowire.Number, n int) int {
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}

func appendVarintField(b []byte, num protowire.Number, v uint64) []byte {
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendBytesHeader(b []byte, num protowire.Number, n int) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendVarint(b, uint64(n))
}

func messageIDSize(ledger, entry uint64) int {
	return sizeVarintField(idLedger, ledger) + sizeVarintField(idEntry, entry)
}

func appendMessageID(b []byte, num protowire.Number, ledger, entry uint64) []byte {
	b = appendBytesHeader(b, num, messageIDSize(ledger, entry))
	b = appendVarintField(b, idLedger, ledger)
	return appendVarintField(b, idEntry, entry)
}

// appendHeader appends the frame header and the BaseCommand's type and sub-message header:
// the caller appends the sub-message's inner bytes (inner of them) and, for payload
// commands, payload bytes of payload section.
func appendHeader(dst []byte, typ pb.BaseCommand_Type, inner, payload int) []byte {
	cmdSize := sizeVarintField(fieldType, uint64(typ)) + sizeBytesField(protowire.Number(typ), inner)
	dst = binary.BigEndian.AppendUint32(dst, uint32(4+cmdSize+payload))
	dst = binary.BigEndian.AppendUint32(dst, uint32(cmdSize))
	dst = appendVarintField(dst, fieldType, uint64(typ))
	return appendBytesHeader(dst, protowire.Number(typ), inner)
}

// AppendSend appends the header and command of a SEND frame whose payload section (appended
// or written after it by the caller) is payload bytes long.
func AppendSend(dst []byte, producerID, sequenceID uint64, numMessages, payload int) []byte {
	inner := sizeVarintField(sendProducerID, producerID) + sizeVarintField(sendSequenceID, sequenceID)
	if numMessages != 1 {
		inner += sizeVarintField(sendNumMessages, uint64(numMessages))
	}
	dst = appendHeader(dst, pb.BaseCommand_SEND, inner, payload)
	dst = appendVarintField(dst, sendProducerID, producerID)
	dst = appendVarintField(dst, sendSequenceID, sequenceID)
	if numMessages != 1 {
		dst = appendVarintField(dst, sendNumMessages, uint64(numMessages))
	}
	return dst
}

// AppendReceipt appends a whole SEND_RECEIPT frame.
func AppendReceipt(dst []byte, producerID, sequenceID, ledger, entry uint64) []byte {
	inner := sizeVarintField(receiptProducerID, producerID) + sizeVarintField(receiptSequenceID, sequenceID) +
		sizeBytesField(receiptMessageID, messageIDSize(ledger, entry))
	dst = appendHeader(dst, pb.BaseCommand_SEND_RECEIPT, inner, 0)
	dst = appendVarintField(dst, receiptProducerID, producerID)
	dst = appendVarintField(dst, receiptSequenceID, sequenceID)
	return appendMessageID(dst, receiptMessageID, ledger, entry)
}

// AppendMessage appends the header and command of a MESSAGE frame whose payload section is
// payload bytes long.
func AppendMessage(dst []byte, consumerID, ledger, entry uint64, payload int) []byte {
	inner := sizeVarintField(messageConsumerID, consumerID) + sizeBytesField(messageMessageID, messageIDSize(ledger, entry))
	dst = appendHeader(dst, pb.BaseCommand_MESSAGE, inner, payload)
	dst = appendVarintField(dst, messageConsumerID, consumerID)
	return appendMessageID(dst, messageMessageID, ledger, entry)
}

// AppendFlow appends a whole FLOW frame granting permits messages.
func AppendFlow(dst []byte, consumerID uint64, permits uint32) []byte {
	inner := sizeVarintField(flowConsumerID, consumerID) + sizeVarintField(flowPermits, uint64(permits))
	dst = appendHeader(dst, pb.BaseCommand_FLOW, inner, 0)
	dst = appendVarintField(dst, flowConsumerID, consumerID)
	return appendVarintField(dst, flowPermits, uint64(permits))
}

// AppendAck appends a whole cumulative ACK frame up to ledger:entry.
func AppendAck(dst []byte, consumerID, ledger, entry uint64) []byte {
	inner := sizeVarintField(ackConsumerID, consumerID) + sizeVarintField(ackType, ackCumulative) +
		sizeBytesField(ackMessageID, messageIDSize(ledger, entry))
	dst = appendHeader(dst, pb.BaseCommand_ACK, inner, 0)
	dst = appendVarintField(dst, ackConsumerID, consumerID)
	dst = appendVarintField(dst, ackType, ackCumulative)
	return appendMessageID(dst, ackMessageID, ledger, entry)
}

// subMessage returns the bytes of BaseCommand field num (the command's sub-message).
func subMessage(cmd []byte, num protowire.Number) ([]byte, bool) {
	for len(cmd) > 0 {
		n, wt, k := protowire.ConsumeTag(cmd)
		if k < 0 {
			return nil, false
		}
		cmd = cmd[k:]
		if n == num && wt == protowire.BytesType {
			v, k := protowire.ConsumeBytes(cmd)
			return v, k >= 0
		}
		k = protowire.ConsumeFieldValue(n, wt, cmd)
		if k < 0 {
			return nil, false
		}
		cmd = cmd[k:]
	}
	return nil, false
}

// fields calls f for every varint field and every bytes field of msg (v = 0, b = the bytes
// for the latter); it reports whether msg parsed.
func fields(msg []byte, f func(num protowire.Number, v uint64, b []byte)) bool {
	for len(msg) > 0 {
		n, wt, k := protowire.ConsumeTag(msg)
		if k < 0 {
			return false
		}
		msg = msg[k:]
		switch wt {
		case protowire.VarintType:
			v, k := protowire.ConsumeVarint(msg)
			if k < 0 {
				return false
			}
			f(n, v, nil)
			msg = msg[k:]
		case protowire.BytesType:
			b, k := protowire.ConsumeBytes(msg)
			if k < 0 {
				return false
			}
			f(n, 0, b)
			msg = msg[k:]
		default:
			k := protowire.ConsumeFieldValue(n, wt, msg)
			if k < 0 {
				return false
			}
			msg = msg[k:]
		}
	}
	return true
}

func messageID(b []byte) (ledger, entry uint64, ok bool) {
	ok = fields(b, func(n protowire.Number, v uint64, _ []byte) {
		switch n {
		case idLedger:
			ledger = v
		case idEntry:
			entry = v
		}
	})
	return ledger, entry, ok
}

// Send reads a SEND command's producer id, sequence id and number of messages (1 unless the
// command says otherwise).
func Send(cmd []byte) (producerID, sequenceID uint64, numMessages int, ok bool) {
	m, ok := subMessage(cmd, protowire.Number(pb.BaseCommand_SEND))
	if !ok {
		return 0, 0, 0, false
	}
	numMessages = 1
	ok = fields(m, func(n protowire.Number, v uint64, _ []byte) {
		switch n {
		case sendProducerID:
			producerID = v
		case sendSequenceID:
			sequenceID = v
		case sendNumMessages:
			numMessages = int(int32(v))
		}
	})
	return producerID, sequenceID, numMessages, ok
}

// Receipt reads a SEND_RECEIPT command's producer id and sequence id.
func Receipt(cmd []byte) (producerID, sequenceID uint64, ok bool) {
	m, ok := subMessage(cmd, protowire.Number(pb.BaseCommand_SEND_RECEIPT))
	if !ok {
		return 0, 0, false
	}
	ok = fields(m, func(n protowire.Number, v uint64, _ []byte) {
		switch n {
		case receiptProducerID:
			producerID = v
		case receiptSequenceID:
			sequenceID = v
		}
	})
	return producerID, sequenceID, ok
}

// Message reads a MESSAGE command's consumer id and message id.
func Message(cmd []byte) (consumerID, ledger, entry uint64, ok bool) {
	m, ok := subMessage(cmd, protowire.Number(pb.BaseCommand_MESSAGE))
	if !ok {
		return 0, 0, 0, false
	}
	idOK := true
	ok = fields(m, func(n protowire.Number, v uint64, b []byte) {
		switch n {
		case messageConsumerID:
			consumerID = v
		case messageMessageID:
			ledger, entry, idOK = messageID(b)
		}
	})
	return consumerID, ledger, entry, ok && idOK
}

// Flow reads a FLOW command's consumer id and permits.
func Flow(cmd []byte) (consumerID uint64, permits uint32, ok bool) {
	m, ok := subMessage(cmd, protowire.Number(pb.BaseCommand_FLOW))
	if !ok {
		return 0, 0, false
	}
	ok = fields(m, func(n protowire.Number, v uint64, _ []byte) {
		switch n {
		case flowConsumerID:
			consumerID = v
		case flowPermits:
			permits = uint32(v)
		}
	})
	return consumerID, permits, ok
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// PayloadSection returns the payload section of a SEND or MESSAGE frame that carries batch
// messages of size bytes each, as a Pulsar client writes it: the 0x0e01 magic, the CRC32C,
// the MessageMetadata (num_messages_in_batch set when batch > 1), then the payload; a batch
// payload is batch entries of [u32 size][SingleMessageMetadata{payload_size}][message]. The
// metadata's sequence id and publish time are fixed: the frame is built once and sent many
// times (the speaker and the proxies never read them).
func PayloadSection(producerName string, size, batch int) []byte {
	md := &pb.MessageMetadata{
		ProducerName: proto.String(producerName),
		SequenceId:   proto.Uint64(0),
		PublishTime:  proto.Uint64(uint64(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli())),
	}
	var data []byte
	if batch > 1 {
		md.NumMessagesInBatch = proto.Int32(int32(batch))
		single, _ := proto.Marshal(&pb.SingleMessageMetadata{PayloadSize: proto.Int32(int32(size))})
		for range batch {
			data = binary.BigEndian.AppendUint32(data, uint32(len(single)))
			data = append(data, single...)
			data = appendPattern(data, size)
		}
		md.UncompressedSize = proto.Uint32(uint32(len(data)))
	} else {
		data = appendPattern(data, size)
		md.UncompressedSize = proto.Uint32(uint32(size))
	}
	mdBytes, _ := proto.Marshal(md)
	out := make([]byte, 0, 10+len(mdBytes)+len(data))
	out = binary.BigEndian.AppendUint16(out, 0x0e01)
	out = append(out, 0, 0, 0, 0)
	out = binary.BigEndian.AppendUint32(out, uint32(len(mdBytes)))
	out = append(out, mdBytes...)
	out = append(out, data...)
	binary.BigEndian.PutUint32(out[2:], crc32.Checksum(out[6:], castagnoli))
	return out
}

func appendPattern(b []byte, n int) []byte {
	for i := range n {
		b = append(b, byte(i*7+1))
	}
	return b
}

// Topic names the topic of a benchmark consumer: the speaker delivers messages of size bytes,
// batch to a MESSAGE frame, on a subscription to it. Producers may use any topic.
func Topic(namespace string, size, batch, n int) string {
	return fmt.Sprintf("persistent://%s/m-%dx%d-%d", namespace, size, batch, n)
}

// delivery reads the message size and batch from a topic named by Topic.
func delivery(topic string) (size, batch int, err error) {
	i := strings.LastIndexByte(topic, '/')
	local := topic[i+1:]
	rest, ok := strings.CutPrefix(local, "m-")
	if ok {
		var sz, bt string
		sz, rest, ok = strings.Cut(rest, "x")
		if ok {
			bt, _, ok = strings.Cut(rest, "-")
			if ok {
				size, err1 := strconv.Atoi(sz)
				batch, err2 := strconv.Atoi(bt)
				if err1 == nil && err2 == nil && size >= 0 && batch >= 1 && size*batch <= MaxPayload {
					return size, batch, nil
				}
			}
		}
	}
	return 0, 0, fmt.Errorf("topic %q does not name a delivery (want .../m-<size>x<batch>-<n>, at most %d bytes a frame)", topic, MaxPayload)
}

// MaxPayload is the largest batch the speaker delivers: a broker's 5 MiB message limit.
const MaxPayload = 5 << 20

// Reader reads frames from a connection and keeps only what a benchmark needs of them: the
// command. Payload sections are skipped without being held, so a 1 MiB frame costs neither
// side a 1 MiB buffer. The buffer starts small and doubles, up to its maximum, while reads
// fill it.
type Reader struct {
	rd        io.Reader
	buf       []byte
	r, w      int
	skip      int
	beforeRd  func() error
	lastRead  time.Time
	maxBuffer int
}

// ErrCommandTooLarge: a frame's command is larger than the reader accepts (1 MiB).
var ErrCommandTooLarge = errors.New("speaker: command too large")

const maxCommand = 1 << 20

// NewReader reads from rd with a first buffer of initial bytes (at most max); beforeRead,
// if not nil, runs before every read from rd (a writer flushes its answers there, so they go
// out in one write per read).
func NewReader(rd io.Reader, initial, max int, beforeRead func() error) *Reader {
	return &Reader{rd: rd, buf: make([]byte, initial), beforeRd: beforeRead, maxBuffer: max}
}

// LastRead is when the last read from the connection returned.
func (r *Reader) LastRead() time.Time { return r.lastRead }

// Next returns the command of the next frame (valid until the next call) and the size of its
// payload section, which it skips.
func (r *Reader) Next() (cmd []byte, payload int, err error) {
	for {
		if r.skip > 0 {
			n := min(r.skip, r.w-r.r)
			r.r += n
			r.skip -= n
		}
		if r.skip == 0 && r.w-r.r >= frame.HeaderSize {
			total := int(binary.BigEndian.Uint32(r.buf[r.r:]))
			cmdSize := int(binary.BigEndian.Uint32(r.buf[r.r+4:]))
			if cmdSize > maxCommand || cmdSize+4 > total {
				return nil, 0, fmt.Errorf("%w: frame of %d bytes with a command of %d", ErrCommandTooLarge, total, cmdSize)
			}
			if r.w-r.r >= frame.HeaderSize+cmdSize {
				cmd = r.buf[r.r+frame.HeaderSize : r.r+frame.HeaderSize+cmdSize]
				r.r += frame.HeaderSize + cmdSize
				r.skip = total - 4 - cmdSize
				return cmd, r.skip, nil
			}
			if frame.HeaderSize+cmdSize > len(r.buf) {
				r.grow(frame.HeaderSize + cmdSize)
			}
		}
		if err := r.fill(); err != nil {
			return nil, 0, err
		}
	}
}

func (r *Reader) grow(need int) {
	size := len(r.buf)
	for size < need {
		size *= 2
	}
	b := make([]byte, size)
	r.w = copy(b, r.buf[r.r:r.w])
	r.r = 0
	r.buf = b
}

// fill reads once, after making room.
func (r *Reader) fill() error {
	switch {
	case r.r == r.w:
		r.r, r.w = 0, 0
	case r.r > 0 && len(r.buf)-r.w < len(r.buf)/4:
		r.w = copy(r.buf, r.buf[r.r:r.w])
		r.r = 0
	}
	if r.beforeRd != nil {
		if err := r.beforeRd(); err != nil {
			return err
		}
	}
	n, err := r.rd.Read(r.buf[r.w:])
	r.lastRead = time.Now()
	if n > 0 {
		full := r.w+n == len(r.buf)
		r.w += n
		if full && len(r.buf) < r.maxBuffer {
			r.grow(len(r.buf) * 2)
		}
		return nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}
