package pulsarclient

import (
	"bytes"
	"fmt"
	"slices"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// Chunked messages. A producer splits a message larger than its broker's maxMessageSize into
// chunks, each an entry of its own whose metadata names the message (uuid), the number of
// chunks, the size of the whole (compressed) payload and the chunk's place. The consumer puts
// them together as Pulsar 4.0.8's Java consumer does (ConsumerImpl.processMessageChunk) and
// delivers one message, whose id is its last chunk's with its first chunk's beside it
// (ChunkMessageIdImpl); acknowledging it acknowledges every chunk, redelivering it
// redelivers them all. Everything about a chunk is its producer's word, so every part of an
// assembly is bounded: how many at once, for how long, how large, and all of it counted
// against the consumer's queue bytes.

const (
	// MaxPendingChunked is how many messages a consumer assembles at once, as the Java
	// consumer's maxPendingChunkedMessage: a chunk that starts one more drops the oldest.
	MaxPendingChunked = 10
	// DefaultChunkExpiry is how long a message may take to be assembled, as the Java
	// consumer's expireTimeOfIncompleteChunkedMessage; then its chunks are acknowledged.
	DefaultChunkExpiry = time.Minute
	// DefaultMaxChunkedSize bounds a chunked message of a consumer without MaxQueuedBytes.
	DefaultMaxChunkedSize = 64 << 20
	// chunkIDCost is what one chunk's id costs an assembly.
	chunkIDCost = 48
	// MaxChunks bounds the chunks of one message. A client cuts a message in chunks of its
	// broker's maxMessageSize (5 MB by default): a few for a message the consumer can hold. The
	// bound keeps the ACK or REDELIVER of every chunk one frame far under a broker's limit
	// (about 10 bytes an id) and the ids an assembly keeps small.
	MaxChunks = 10_000
)

// chunkKey names a message being assembled: its producer's uuid, on its partition (each
// partition's consumer assembles its own, as in the Java client).
type chunkKey struct {
	partition int32
	uuid      string
}

// assembly is one message being put together.
type assembly struct {
	key     chunkKey
	chunks  int         // num_chunks_from_msg
	total   int         // total_chunk_msg_size: the whole payload
	last    int         // the last chunk id taken
	parts   [][]byte    // the chunks' bytes, kept as received (no copy before the last)
	have    int         // their length together
	ids     []MessageID // the entries of the chunks taken
	started time.Time
	size    int // counted against the consumer's queue
}

// assembler is a consumer's messages being assembled, guarded by Consumer.mu.
type assembler struct {
	pending map[chunkKey]*assembly
	order   []*assembly // oldest first; at most MaxPendingChunked
}

// isChunk reports whether an entry is one chunk of a message to assemble (a batch is never
// chunked; an encrypted chunk is refused one by one unless delivered undecrypted).
func isChunk(md *pb.MessageMetadata, consume bool) bool {
	return md.GetNumChunksFromMsg() > 1 && md.NumMessagesInBatch == nil && (len(md.EncryptionKeys) == 0 || consume)
}

// chunkLimit bounds a chunked message (compressed and not), and all the consumer assembles
// at once: its MaxQueuedBytes, which the message would fill anyway, as the Java client holds
// a message whole in memory.
func (co *Consumer) chunkLimit() int {
	if co.opts.MaxQueuedBytes > 0 {
		return co.opts.MaxQueuedBytes
	}
	return DefaultMaxChunkedSize
}

func (co *Consumer) chunkExpiry() time.Duration {
	if co.opts.ChunkExpiry > 0 {
		return co.opts.ChunkExpiry
	}
	return DefaultChunkExpiry
}

// chunkLocked takes one chunk: the message's assembly once its last chunk is in (taken out
// of the assembler), nil before. Each chunk but a completing one gives its permit back, as
// the Java consumer gives it.
func (pc *partConsumer) chunkLocked(md *pb.MessageMetadata, data []byte, entry MessageID) *assembly {
	co := pc.co
	a, complete := pc.takeChunkLocked(md, data, entry)
	if !complete {
		pc.returnPermitsLocked(1)
		return nil
	}
	co.forgetAssemblyLocked(a)
	return a
}

// takeChunkLocked is chunkLocked's rule, the Java consumer's: chunk 0 starts a message (one
// already started with that uuid goes, its chunks acknowledged unless this is one of them
// again); the next chunk in order joins it; a chunk taken already is dropped (acknowledged
// if it is another entry: the producer stored it twice); any other chunk ends the message
// unassembled and is acknowledged once older than the expiry, else left to the ack timeout.
func (pc *partConsumer) takeChunkLocked(md *pb.MessageMetadata, data []byte, entry MessageID) (*assembly, bool) {
	co, now := pc.co, time.Now()
	co.expireChunksLocked(now)
	key := chunkKey{partition: pc.partition, uuid: md.GetUuid()}
	a := co.chunks.pending[key]
	if err := co.badChunk(md); err != nil {
		co.c.log.Warn().Err(err).Str("topic", pc.topic).Msg("discarding a chunked message the proxy cannot take")
		if a != nil {
			co.dropAssemblyLocked(a, dropCorrupt)
		}
		pc.ackAllLocked([]MessageID{entry}, pb.CommandAck_ChecksumMismatch.Enum())
		return nil, false
	}
	id := int(md.GetChunkId())
	if id == 0 {
		if a != nil {
			co.dropAssemblyLocked(a, dropUnlessAmong(a, entry))
		}
		a = co.startAssemblyLocked(key, md, now)
	}
	switch {
	case a != nil && id <= a.last:
		if !slices.Contains(a.ids, entry) {
			pc.ackAllLocked([]MessageID{entry}, nil)
		}
		return nil, false
	case a == nil || id != a.last+1 || int(md.GetNumChunksFromMsg()) != a.chunks || int(md.GetTotalChunkMsgSize()) != a.total:
		if a != nil {
			co.dropAssemblyLocked(a, dropSilently)
		}
		if now.After(time.UnixMilli(int64(md.GetPublishTime())).Add(co.chunkExpiry())) {
			pc.ackAllLocked([]MessageID{entry}, nil)
		} else {
			co.tracker.watch(entry)
		}
		return nil, false
	case a.have+len(data) > a.total:
		co.c.log.Warn().Str("topic", pc.topic).Msg("discarding a chunked message whose chunks exceed its size")
		co.dropAssemblyLocked(a, dropCorrupt)
		pc.ackAllLocked([]MessageID{entry}, pb.CommandAck_ChecksumMismatch.Enum())
		return nil, false
	}
	co.addChunkLocked(a, id, data, entry)
	return a, id == a.chunks-1
}

// badChunk says why a chunk's metadata cannot be followed: a chunk id outside its count,
// more chunks than MaxChunks or than bytes, or a message whose assembly (its bytes and its
// chunks' ids) would be over chunkLimit.
func (co *Consumer) badChunk(md *pb.MessageMetadata) error {
	n, total, id := int(md.GetNumChunksFromMsg()), int(md.GetTotalChunkMsgSize()), int(md.GetChunkId())
	switch {
	case id < 0 || id >= n:
		return fmt.Errorf("chunk %d of %d", id, n)
	case n > MaxChunks:
		return fmt.Errorf("a message in %d chunks, over %d", n, MaxChunks)
	case total < n:
		return fmt.Errorf("%d chunks of a message of %d bytes", n, total)
	case messageOverhead+total+chunkIDCost*n > co.chunkLimit():
		return fmt.Errorf("a chunked message of %d bytes in %d chunks, over the consumer's bound of %d", total, n, co.chunkLimit())
	}
	return nil
}

// startAssemblyLocked begins a message, the oldest being assembled dropped when
// MaxPendingChunked are already.
func (co *Consumer) startAssemblyLocked(key chunkKey, md *pb.MessageMetadata, now time.Time) *assembly {
	if len(co.chunks.order) >= MaxPendingChunked {
		co.dropAssemblyLocked(co.chunks.order[0], dropWatched)
	}
	a := &assembly{key: key, chunks: int(md.GetNumChunksFromMsg()), total: int(md.GetTotalChunkMsgSize()), last: -1, started: now}
	if co.chunks.pending == nil {
		co.chunks.pending = map[chunkKey]*assembly{}
	}
	co.chunks.pending[key] = a
	co.chunks.order = append(co.chunks.order, a)
	co.resizeLocked(a)
	co.tracker.arm(now.Add(co.chunkExpiry()))
	return a
}

// addChunkLocked appends a chunk, older messages dropped first while all that is being
// assembled would be over chunkLimit.
func (co *Consumer) addChunkLocked(a *assembly, id int, data []byte, entry MessageID) {
	for co.assemblingLocked()+len(data) > co.chunkLimit() && co.chunks.order[0] != a {
		co.dropAssemblyLocked(co.chunks.order[0], dropWatched)
	}
	// A copy: data is a part of the entry's frame, which holds the chunk's metadata too (its
	// properties may be far larger than the data counted).
	a.parts = append(a.parts, bytes.Clone(data))
	a.have += len(data)
	a.ids = append(a.ids, entry)
	a.last = id
	co.resizeLocked(a)
}

func (co *Consumer) assemblingLocked() int {
	n := 0
	for _, a := range co.chunks.order {
		n += a.size
	}
	return n
}

// resizeLocked counts what an assembly holds against the consumer's queue.
func (co *Consumer) resizeLocked(a *assembly) {
	size := messageOverhead + len(a.key.uuid) + a.have + chunkIDCost*len(a.ids)
	co.addBytes(size - a.size)
	a.size = size
}

// forgetAssemblyLocked takes an assembly out of the assembler; its bytes are no longer
// counted (a completed one's are counted again as its message).
func (co *Consumer) forgetAssemblyLocked(a *assembly) {
	delete(co.chunks.pending, a.key)
	if i := slices.Index(co.chunks.order, a); i >= 0 {
		co.chunks.order = slices.Delete(co.chunks.order, i, i+1)
	}
	co.addBytes(-a.size)
	a.size = 0
	co.flowAllLocked()
}

// dropRule is how a dropped assembly's chunks are treated: acknowledged (with validation,
// as corrupt), left to the ack timeout (watch), or neither.
type dropRule struct {
	ack        bool
	validation *pb.CommandAck_ValidationError
	watch      bool
}

var (
	dropSilently = dropRule{}
	// dropWatched: left to the ack timeout (Java's autoAckOldestChunkedMessageOnQueueFull=false).
	dropWatched = dropRule{watch: true}
	dropAcked   = dropRule{ack: true}
	dropCorrupt = dropRule{ack: true, validation: pb.CommandAck_ChecksumMismatch.Enum()}
)

// dropUnlessAmong: when a message's chunk 0 comes again as another entry, the chunks taken
// belong to a message its producer never finished, and are acknowledged; when the same entry
// comes again it is a redelivery, and nothing is.
func dropUnlessAmong(a *assembly, entry MessageID) dropRule {
	if slices.Contains(a.ids, entry) {
		return dropSilently
	}
	return dropAcked
}

// dropAssemblyLocked ends an assembly unfinished, its chunks treated by rule.
func (co *Consumer) dropAssemblyLocked(a *assembly, rule dropRule) {
	co.forgetAssemblyLocked(a)
	pc := co.partOf(a.key.partition)
	switch {
	case pc == nil || len(a.ids) == 0:
	case rule.ack:
		pc.ackAllLocked(a.ids, rule.validation)
	case rule.watch:
		for _, id := range a.ids {
			co.tracker.watch(id)
		}
	}
}

// expireChunksLocked drops the assemblies older than the expiry, their chunks acknowledged
// (as the Java consumer's expiry does), and has the timer come back for the next.
func (co *Consumer) expireChunksLocked(now time.Time) {
	d := co.chunkExpiry()
	for len(co.chunks.order) > 0 {
		a := co.chunks.order[0]
		if now.Before(a.started.Add(d)) {
			co.tracker.arm(a.started.Add(d))
			return
		}
		co.dropAssemblyLocked(a, dropAcked)
	}
}

// dropPartitionChunksLocked forgets a partition's assemblies: its broker sends them again.
func (co *Consumer) dropPartitionChunksLocked(partition int32) {
	for _, a := range slices.Clone(co.chunks.order) {
		if a.key.partition == partition {
			co.dropAssemblyLocked(a, dropSilently)
		}
	}
}

// assembled is a completed assembly's message: decompressed (or as it is, encrypted) with
// its last chunk's metadata, its id the last chunk's with the first's.
func (z *codecs) assembled(m *pb.CommandMessage, md *pb.MessageMetadata, a *assembly, partition int32, maxSize int, consume bool) ([]*Message, error) {
	if a.have != a.total {
		return nil, fmt.Errorf("a chunked message of %d bytes where its chunks said %d", a.have, a.total)
	}
	first, last := a.ids[0], a.ids[len(a.ids)-1]
	id := last
	id.Chunked, id.FirstLedger, id.FirstEntry = true, first.Ledger, first.Entry
	base := Message{ID: id, PublishTime: md.GetPublishTime(), RedeliveryCount: m.GetRedeliveryCount(), chunks: a.ids}
	msg, err := z.single(base, md, bytes.Join(a.parts, nil), maxSize, consume)
	if err != nil {
		return nil, err
	}
	msg.size += chunkIDCost * len(a.ids)
	return []*Message{msg}, nil
}
