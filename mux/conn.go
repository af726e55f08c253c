package mux

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/upstream"
)

// Handler is a client session on a multiplexed connection, as the connection sees it.
type Handler interface {
	// Deliver hands over broker frames for the client, in order, their commands mapped back,
	// their payloads as they came: the frames of one read of the broker connection together
	// (the frames are the handler's to keep, the slice is not). It must not wait (the
	// connection's reader serves every client); an error means the client cannot take them
	// (its queue is over its bound) and the client is detached. Frames of the data path
	// (MESSAGE, SEND_RECEIPT, ACK_RESPONSE) are to be queued as they are: they may share a
	// chunk of the client's, which its bound counts through them (see chunkedDown).
	Deliver([]Frame) error
	// Lost says the broker connection failed: the client is detached and held is what it
	// had there, to be closed at the client so it recreates it.
	Lost(held Held)
}

// ErrLost: the member's broker connection failed or the member was detached.
var ErrLost = errors.New("mux: broker connection lost")

// Conn is one pooled broker connection shared by many clients. Its reader maps each broker
// frame back to its client; its writer takes the clients' frames in turn (at most quantum
// bytes of one client before the next one's), so a busy client cannot hold the others up.
type Conn struct {
	pool      *Pool
	key       Key
	nc        net.Conn
	rd        *frame.Reader
	connected *pb.CommandConnected
	maxFrame  int // the largest frame the broker reads (see BrokerFrameLimit)
	log       zerolog.Logger

	mu       sync.Mutex
	writable *sync.Cond // the writer waits for frames
	m        *Mapper
	members  map[*Client]*Member
	ready    ring[*Member] // members with frames queued, in turn
	own      ring[Frame]   // the proxy's own frames (PONG, AUTH_RESPONSE, closes), first in line
	dead     bool
	idleAt   time.Time // when the last member left; zero while there are members
}

// Member is one client attached to a Conn.
type Member struct {
	conn    *Conn
	client  *Client
	handler Handler
	up      ring[Frame]
	upBytes int        // what the frames in up hold (Frame.held)
	queued  bool       // in conn.ready
	space   *sync.Cond // the member's Send waits here for room in its queue (on conn.mu)
	// the reader's: the read in which the member last had frames mapped back, and its place
	// among that read's members (see downLoad)
	downRead uint64
	downSlot int
	downLast int // its latest frame's place in the load's frames
	// handing is held while frames or a loss are handed to the handler: a loss the writer
	// found comes after the frames the reader is handing over, never between or before them.
	handing sync.Mutex
	// the chunks the member's small frames are built in: towards the broker (under the
	// conn's lock) and back (the reader's)
	upTail, downTail chunkTail
}

// upQueueBytes bounds what one client's frames queued towards the broker may hold (their
// buffers, see Frame.held): beyond it the client's reader waits, so a fast publisher slows
// down itself, not its neighbours.
const upQueueBytes = 1 << 20

// readBuffer is the shared connection's read buffer: one read takes in many clients' frames.
const readBuffer = 256 << 10

// quantum is how many bytes of one client the writer takes before the next client's turn.
const quantum = 64 << 10

func newConn(p *Pool, key Key, uc *upstream.Conn) *Conn {
	c := &Conn{pool: p, key: key, nc: uc.Conn, rd: uc.Reader, connected: uc.Connected,
		maxFrame: BrokerFrameLimit(uc.Connected, p.cfg.Connector.MaxFrameSize),
		m:        NewMapper(), members: map[*Client]*Member{}, idleAt: time.Now(),
		log: p.cfg.Logger.With().Str("broker", key.Addr).Logger()}
	c.writable = sync.NewCond(&c.mu)
	c.rd.Reserve(readBuffer)
	go c.readLoop()
	go c.writeLoop()
	return c
}

// Connected is the broker's answer to the pooled connection's CONNECT.
func (c *Conn) Connected() *pb.CommandConnected { return c.connected }

func (c *Conn) attach(h Handler) *Member {
	mb := &Member{conn: c, client: NewClient(), handler: h, space: sync.NewCond(&c.mu)}
	c.members[mb.client] = mb
	c.idleAt = time.Time{}
	c.pool.metrics.clients.Inc()
	return mb
}

// Connected is the CONNECTED of the member's broker connection.
func (mb *Member) Connected() *pb.CommandConnected { return mb.conn.connected }

// Send maps a client's command (its bytes as the client sent them) and queues it with its
// payload, which is forwarded as it is; neither is kept. A small frame is built under the
// connection's lock in the client's chunk (see chunk); a larger one's payload is copied into a
// pooled buffer before the lock is taken, and the command mapped in front of it. It waits
// while the client has upQueueBytes queued (the client's own backpressure). Errors:
// frame.ErrMalformed, the mapping's (ErrNotAllowed, ErrUnknownID: nothing was sent), ErrLost
// (nothing was sent: the command may go again on another connection).
func (mb *Member) Send(command, payload []byte) error {
	if need := chunkedSize(command, payload); need > 0 {
		return mb.sendInTail(need, command, payload)
	}
	return mb.send(mb.conn.pool.bufs.newFrame(command, payload), command)
}

// sendInTail is Send of a small frame: built in the member's tail chunk, under the lock.
func (mb *Member) sendInTail(need int, command, payload []byte) error {
	c := mb.conn
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := mb.waitForRoomLocked(); err != nil {
		return err
	}
	f, end, err := mb.buildInTail(need, command, payload)
	if err == nil {
		err = c.checkSizeLocked(f)
	}
	if err != nil {
		if !mb.queued {
			mb.upTail.idle() // the writer, which lets go of it, has nothing of the member's
		}
		return err
	}
	f.commit(end)
	return mb.enqueueLocked(f)
}

// waitForRoomLocked waits while the member has upQueueBytes queued; ErrLost when the
// connection failed or the member was detached meanwhile.
func (mb *Member) waitForRoomLocked() error {
	c := mb.conn
	for mb.upBytes > upQueueBytes && !c.dead && !mb.client.detached {
		mb.space.Wait()
	}
	if c.dead || mb.client.detached {
		return ErrLost
	}
	return nil
}

// checkSizeLocked refuses a frame over the broker's limit. Checked as the frame goes out, ids
// mapped: a mapped id may be wider than the client's. Mapped ids were taken for nothing; the
// client's session ends.
func (c *Conn) checkSizeLocked(f Frame) error {
	if f.Size() > c.maxFrame {
		return fmt.Errorf("%w: %d bytes, the broker reads at most %d", ErrOverBrokerLimit, f.Size(), c.maxFrame)
	}
	return nil
}

// SendOwned is Send for a payload handed over in the pooled buffer pay it was read into
// (frame.Reader.TakeLarge): it is not copied. Once sent, pay is the frame's (put back when
// the frame was written); after an error it is still the caller's.
func (mb *Member) SendOwned(command, payload []byte, pay *frame.Buffer) error {
	return mb.send(mb.conn.pool.bufs.ownFrame(command, payload, pay), command)
}

func (mb *Member) send(fb frameBuf, command []byte) error {
	c := mb.conn
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := mb.waitForRoomLocked(); err != nil {
		fb.buf.Put()
		return err
	}
	b, err := c.m.AppendUp(fb.cmd(), mb.client, command)
	if err != nil {
		fb.buf.Put()
		return err
	}
	f, err := fb.finish(b)
	if err != nil {
		return err
	}
	if err := c.checkSizeLocked(f); err != nil {
		f.buf.Put() // pay, if any, is still the caller's
		return err
	}
	return mb.enqueueLocked(f)
}

// ErrOverBrokerLimit: a frame larger than the shared connection's broker reads. Its frame
// decoder would fail and close the connection under every client on it.
var ErrOverBrokerLimit = errors.New("mux: frame over the broker's limit")

// brokerFramePadding is what a broker reads beyond its max_message_size in one frame: the
// command and the message's metadata (Pulsar's Commands.MESSAGE_SIZE_FRAME_PADDING).
const brokerFramePadding = 10 << 10

// BrokerFrameLimit is the largest frame a broker that answered CONNECTED so reads, within the
// proxy's own limit (proxyMax <= 0: frame.DefaultMaxFrameSize).
func BrokerFrameLimit(c *pb.CommandConnected, proxyMax int) int {
	if proxyMax <= 0 {
		proxyMax = frame.DefaultMaxFrameSize
	}
	if m := int(c.GetMaxMessageSize()); m > 0 && m+brokerFramePadding < proxyMax {
		return m + brokerFramePadding
	}
	return proxyMax
}

func (mb *Member) enqueueLocked(f Frame) error {
	c := mb.conn
	mb.up.push(f)
	mb.upBytes += f.held()
	if !mb.queued {
		mb.queued = true
		c.ready.push(mb)
	}
	c.writable.Signal()
	return nil
}

// Leave detaches the client, which went away: its producers, consumers and topic-list
// watchers are closed on the broker at once, and whatever it still had queued is dropped
// (its commands must not reach the broker after the closes).
func (mb *Member) Leave() {
	c := mb.conn
	c.mu.Lock()
	if mb.client.detached {
		c.mu.Unlock()
		return
	}
	held := c.detachLocked(mb)
	var closes []*pb.BaseCommand
	for _, id := range held.Producers {
		closes = append(closes, &pb.BaseCommand{Type: pb.BaseCommand_CLOSE_PRODUCER.Enum(),
			CloseProducer: &pb.CommandCloseProducer{ProducerId: proto.Uint64(id), RequestId: proto.Uint64(c.m.Request())}})
	}
	for _, id := range held.Consumers {
		closes = append(closes, &pb.BaseCommand{Type: pb.BaseCommand_CLOSE_CONSUMER.Enum(),
			CloseConsumer: &pb.CommandCloseConsumer{ConsumerId: proto.Uint64(id), RequestId: proto.Uint64(c.m.Request())}})
	}
	for _, id := range held.Watchers {
		closes = append(closes, &pb.BaseCommand{Type: pb.BaseCommand_WATCH_TOPIC_LIST_CLOSE.Enum(),
			WatchTopicListClose: &pb.CommandWatchTopicListClose{WatcherId: proto.Uint64(id), RequestId: proto.Uint64(c.m.Request())}})
	}
	for _, cmd := range closes {
		if f, err := Encode(cmd, nil); err == nil {
			c.own.push(f)
		}
	}
	c.writable.Signal()
	c.mu.Unlock()
	c.pool.metrics.leaveCloses.Add(float64(len(closes)))
}

// ReleaseProducer closes the client's producer id on the broker without the client asking
// (a routed session moves it to its topic's new owner): the mapping forgets it at once, and
// the broker's answer to the proxy's CLOSE_PRODUCER is dropped. An id the client does not
// have here is ignored.
func (mb *Member) ReleaseProducer(id uint64) { mb.release(producerID, id) }

// ReleaseConsumer is ReleaseProducer for a consumer id.
func (mb *Member) ReleaseConsumer(id uint64) { mb.release(consumerID, id) }

func (mb *Member) release(k kind, id uint64) {
	c := mb.conn
	c.mu.Lock()
	defer c.mu.Unlock()
	if mb.client.detached || c.dead {
		return
	}
	mapped, ok := c.m.release(mb.client, k, id)
	if !ok {
		return
	}
	req := proto.Uint64(c.m.Request())
	cmd := &pb.BaseCommand{Type: pb.BaseCommand_CLOSE_PRODUCER.Enum(), CloseProducer: &pb.CommandCloseProducer{ProducerId: proto.Uint64(mapped), RequestId: req}}
	if k == consumerID {
		cmd = &pb.BaseCommand{Type: pb.BaseCommand_CLOSE_CONSUMER.Enum(), CloseConsumer: &pb.CommandCloseConsumer{ConsumerId: proto.Uint64(mapped), RequestId: req}}
	}
	if f, err := Encode(cmd, nil); err == nil {
		c.own.push(f)
		c.writable.Signal()
	}
}

// detachLocked removes a member from the connection and the mapping.
func (c *Conn) detachLocked(mb *Member) Held {
	held := c.m.Detach(mb.client)
	delete(c.members, mb.client)
	mb.up, mb.upBytes = ring[Frame]{}, 0
	mb.upTail.drop()
	if mb.queued {
		c.ready.removeFunc(func(r *Member) bool { return r == mb })
		mb.queued = false
	}
	if len(c.members) == 0 {
		c.idleAt = time.Now()
	}
	mb.space.Broadcast()
	c.pool.metrics.clients.Dec()
	return held
}

// sendOwn queues one of the proxy's own commands.
func (c *Conn) sendOwn(cmd *pb.BaseCommand) {
	f, err := Encode(cmd, nil)
	if err != nil {
		return
	}
	c.mu.Lock()
	c.own.push(f)
	c.writable.Signal()
	c.mu.Unlock()
}

// writeLoop writes the proxy's own frames, then the members' in turn, each vectored write
// carrying up to maxBatch bytes.
func (c *Conn) writeLoop() {
	var w batch
	for {
		c.mu.Lock()
		for c.own.Len() == 0 && c.ready.Len() == 0 && !c.dead {
			c.writable.Wait()
		}
		if c.dead {
			c.mu.Unlock()
			return
		}
		n, _ := w.take(&c.own, maxBatch)
		if c.own.Len() > 0 {
			n = maxBatch // the rest next time
		}
		for n < maxBatch && c.ready.Len() > 0 {
			mb := c.ready.pop()
			k, held := w.take(&mb.up, quantum)
			mb.upBytes -= held
			n += k
			if mb.up.Len() > 0 {
				c.ready.push(mb)
			} else {
				mb.queued = false
				mb.upTail.idle()
			}
			if mb.upBytes <= upQueueBytes {
				// Only this member can have waited for what was taken: waking every
				// waiting member each write costs a wake-up per client per frame.
				mb.space.Broadcast()
			}
		}
		c.mu.Unlock()
		if err := w.write(c.nc); err != nil {
			c.fail(fmt.Errorf("write: %w", err))
			return
		}
		c.pool.metrics.bytesUp.Add(float64(n))
	}
}

// readLoop maps each broker frame back to its client; the connection's own commands (PING,
// AUTH_CHALLENGE) it answers itself. A client's frames go to it together once the frames
// already read are mapped (see flush).
func (c *Conn) readLoop() {
	var dl downLoad
	for {
		if !c.rd.FrameBuffered() {
			dl.flush(c) // before the read waits
		}
		fr, err := c.rd.ReadFrame()
		if err != nil {
			dl.flush(c) // what was mapped goes before the clients hear of the loss
			c.fail(fmt.Errorf("read: %w", err))
			return
		}
		t, err := frame.PeekType(fr.Command)
		if err != nil {
			dl.flush(c)
			c.fail(fmt.Errorf("broker frame: %w", err))
			return
		}
		switch t {
		case pb.BaseCommand_PING:
			c.sendOwn(frame.Pong())
			continue
		case pb.BaseCommand_PONG, pb.BaseCommand_CONNECTED:
			continue
		case pb.BaseCommand_AUTH_CHALLENGE:
			dl.flush(c) // the credentials may take a while to come
			if err := c.answerChallenge(); err != nil {
				c.fail(err)
				return
			}
			continue
		}
		dl.add(c, t, fr.Command, fr.Payload)
	}
}

// downLoad is what the reader has mapped back and not yet handed over: the frames of the
// reads since the last flush, in the order they came, each with its member's place in
// members. One load a connection, its slices reused from read to read: a member's own slice
// of frames, grown to a read's worth and let go to keep quiet members small, allocated on
// every read of a busy one.
type downLoad struct {
	read    uint64    // counts the flushes: a member whose downRead is not this has no frames yet
	members []*Member // those with frames, in the order of their first
	counts  []int     // how many frames each of members has
	frames  []Frame   // in the order they came
	owners  []int     // frames[i] is members[owners[i]]'s
	grouped []Frame   // frames grouped by member, each member's in order (flush's)
	starts  []int     // group's: where each member's next frame goes in grouped
	bytes   int
	scratch []byte // where a small frame's command is mapped before it goes into a chunk
}

// add maps a broker command (of type t) back and keeps it (its payload copied: the reader's
// buffer is reused) for its client; what belongs to no client is dropped. A small frame is
// built in its client's down chunk, others in a buffer of their own.
func (dl *downLoad) add(c *Conn, t pb.BaseCommand_Type, command, payload []byte) {
	var f Frame
	var mb *Member
	if chunkedSize(command, payload) > 0 && chunkedDown(t) {
		mb, f = dl.addInChunk(c, t, command, payload)
	} else {
		mb, f = dl.addInBuffer(c, t, command, payload)
	}
	if mb == nil {
		c.pool.metrics.dropped.Inc()
		return
	}
	f.typ = t
	if mb.downRead != dl.read+1 {
		mb.downRead, mb.downSlot = dl.read+1, len(dl.members)
		dl.members = append(dl.members, mb)
		dl.counts = append(dl.counts, 0)
	}
	dl.counts[mb.downSlot]++
	mb.downLast = len(dl.frames)
	dl.frames = append(dl.frames, f)
	dl.owners = append(dl.owners, mb.downSlot)
	dl.bytes += f.Size()
}

// chunkedDown reports whether broker frames of type t are built in their client's chunk:
// those of the data path, which a client's handler queues as they are. A frame released
// before it is written (a topic list a handler filters, a close it rewrites) would take its
// count with it while its chunk stays kept by the frames before it.
func chunkedDown(t pb.BaseCommand_Type) bool {
	switch t {
	case pb.BaseCommand_MESSAGE, pb.BaseCommand_SEND_RECEIPT, pb.BaseCommand_ACK_RESPONSE:
		return true
	}
	return false
}

// addInChunk maps the command into the load's scratch, then copies the frame into its
// member's down chunk; a nil member: the frame was dropped.
func (dl *downLoad) addInChunk(c *Conn, t pb.BaseCommand_Type, command, payload []byte) (*Member, Frame) {
	if cap(dl.scratch) < frame.HeaderSize {
		dl.scratch = make([]byte, 0, 256)
	}
	c.mu.Lock()
	b, owner, err := c.m.appendDown(dl.scratch[:frame.HeaderSize], t, command)
	mb := c.members[owner]
	c.mu.Unlock()
	dl.scratch = b[:0]
	if err != nil || mb == nil {
		dl.dropped(c, err)
		return nil, Frame{}
	}
	cmdLen := len(b) - frame.HeaderSize
	binary.BigEndian.PutUint32(b, uint32(4+cmdLen+len(payload)))
	binary.BigEndian.PutUint32(b[4:], uint32(cmdLen))
	f, left := mb.inChunk(b, payload, &c.pool.bufs)
	dl.charge(mb, left)
	return mb, f
}

// charge counts room a member's down chunk let go unused as held by the member's latest
// frame of this load, which is written no sooner than the chunk's last: a client's bound
// covers the chunks its frames keep, not only their bytes (one small frame a read, each
// in a chunk of its own, kept twice the bound).
func (dl *downLoad) charge(mb *Member, left int) {
	if left > 0 && mb.downRead == dl.read+1 {
		dl.frames[mb.downLast].extra += int32(left)
	}
}

// addInBuffer builds the frame in a pooled buffer of its own (a large payload stays in the
// buffer it was read into); a nil member: the frame was dropped.
func (dl *downLoad) addInBuffer(c *Conn, t pb.BaseCommand_Type, command, payload []byte) (*Member, Frame) {
	fb := c.newFrame(command, payload)
	c.mu.Lock()
	b, owner, err := c.m.appendDown(fb.cmd(), t, command)
	mb := c.members[owner]
	c.mu.Unlock()
	if err != nil || mb == nil {
		fb.buf.Put()
		fb.pay.Put()
		dl.dropped(c, err)
		return nil, Frame{}
	}
	f, err := fb.finish(b)
	if err != nil {
		fb.pay.Put()
		return nil, Frame{}
	}
	return mb, f
}

// dropped notes a broker frame no client takes.
func (dl *downLoad) dropped(c *Conn, err error) {
	if err != nil && !errors.Is(err, ErrUnknownID) {
		c.log.Debug().Err(err).Msg("dropping a broker frame no client can take")
	}
}

// newFrame starts the frame of a broker frame just read: a large message's payload stays in
// the buffer it was read into, which the frame takes from the reader; others are copied (the
// reader's buffer is reused).
func (c *Conn) newFrame(command, payload []byte) frameBuf {
	if len(payload) > 0 {
		if pay := c.rd.TakeLarge(); pay != nil {
			return c.pool.bufs.ownFrame(command, payload, pay)
		}
	}
	return c.pool.bufs.newFrame(command, payload)
}

// detached reports whether the member has left or was detached by a failure.
func (mb *Member) detached() bool {
	mb.conn.mu.Lock()
	defer mb.conn.mu.Unlock()
	return mb.client.detached
}

// flush hands each member its frames: one push and one wake of its writer for all that one
// read of the broker connection brought it, where one per frame made a client's writer
// write a frame or two at a time.
func (dl *downLoad) flush(c *Conn) {
	if len(dl.members) == 0 {
		return
	}
	c.pool.metrics.bytesDown.Add(float64(dl.bytes))
	byMember := dl.group()
	for i, mb := range dl.members {
		fs := byMember[:dl.counts[i]:dl.counts[i]] // an append by the handler cannot reach the next member's
		byMember = byMember[dl.counts[i]:]
		fs[len(fs)-1].extra += int32(mb.downTail.roomLeft()) // let go below, unfilled
		mb.handing.Lock()
		if mb.detached() { // it left, or was told of a loss: what came before it is dropped
			ReleaseAll(fs)
		} else if err := mb.handler.Deliver(fs); err != nil {
			if errors.Is(err, ErrQueueFull) {
				c.pool.metrics.slowClients.Inc()
			}
			mb.Leave()
		}
		mb.handing.Unlock()
		mb.downTail.idle() // its frames are the client's now; it may not get more for a while
	}
	dl.reset()
}

// group is the load's frames grouped by member, in the order of members, each member's in
// the order they came.
func (dl *downLoad) group() []Frame {
	if len(dl.members) == 1 {
		return dl.frames
	}
	dl.starts = dl.starts[:0]
	at := 0
	for _, n := range dl.counts {
		dl.starts = append(dl.starts, at)
		at += n
	}
	dl.grouped = slices.Grow(dl.grouped[:0], len(dl.frames))[:len(dl.frames)]
	for i, f := range dl.frames {
		m := dl.owners[i]
		dl.grouped[dl.starts[m]] = f
		dl.starts[m]++
	}
	return dl.grouped
}

// reset empties the load for the next read, keeping its room up to maxLoadFrames (the
// reader flushes before it reads again: a read's worth) and nothing the frames pointed at.
func (dl *downLoad) reset() {
	clear(dl.members)
	clear(dl.frames)
	clear(dl.grouped)
	dl.members, dl.counts, dl.starts = dl.members[:0], dl.counts[:0], dl.starts[:0]
	dl.frames, dl.owners, dl.grouped = dl.frames[:0], dl.owners[:0], dl.grouped[:0]
	if cap(dl.frames) > maxLoadFrames {
		dl.frames, dl.owners, dl.grouped = nil, nil, nil
	}
	dl.bytes = 0
	dl.read++
}

// maxLoadFrames is the most frames' room a connection's load keeps between reads (a 256 KiB
// read of 30-byte receipts is about 9,000; a read buffer grown for a large frame may bring
// more, whose room is let go).
const maxLoadFrames = 16 << 10

func (c *Conn) answerChallenge() error {
	resp, err := c.pool.cfg.Connector.AuthResponse(c.key.Addr)
	if err != nil {
		return err
	}
	c.sendOwn(resp)
	return nil
}

// fail ends the connection: every member is detached and told what it lost, so its client
// recreates its producers and consumers (on another connection).
func (c *Conn) fail(err error) {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return
	}
	c.dead = true
	type lost struct {
		mb   *Member
		held Held
	}
	var all []lost
	for _, mb := range c.members {
		all = append(all, lost{mb, c.detachLocked(mb)})
	}
	c.writable.Broadcast()
	c.mu.Unlock()
	c.nc.Close()
	c.pool.remove(c)
	c.log.Info().Err(err).Int("clients", len(all)).Msg("multiplexed broker connection closed")
	for _, l := range all {
		l.mb.handing.Lock()
		l.mb.handler.Lost(l.held)
		l.mb.handing.Unlock()
	}
}

// load is the number of clients on the connection; -1 once it failed.
func (c *Conn) load() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return -1
	}
	return len(c.members)
}

// idleSince is when the last client left, zero while there are clients.
func (c *Conn) idleSince() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.idleAt
}

// mappedIDs is how many ids the connection's mapping holds.
func (c *Conn) mappedIDs() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m.InUse()
}

// closeIfIdle closes the connection if it still has no client (one may have just arrived).
func (c *Conn) closeIfIdle() {
	c.mu.Lock()
	idle := len(c.members) == 0 && !c.dead
	c.mu.Unlock()
	if idle {
		c.fail(errors.New("idle"))
	}
}
