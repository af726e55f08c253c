package pulsarclient

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/upstream"
)

// writeTimeout bounds one write to a broker: a broker that reads nothing for this long is
// treated as gone (the connection closes and its producers and consumers come back).
const writeTimeout = 30 * time.Second

// producerHandler and consumerHandler are what a connection tells a partition's producer
// or consumer.
type producerHandler interface {
	receipt(r *pb.CommandSendReceipt)
	sendError(e *pb.CommandSendError)
	disconnected(c *conn)
}

type consumerHandler interface {
	message(m *pb.CommandMessage, payload []byte)
	endOfTopic()
	disconnected(c *conn)
}

// conn is one broker connection of a Client: one goroutine reads it, writers take turns.
type conn struct {
	client    *Client
	addr      string
	nc        *upstream.Conn
	wmu       sync.Mutex
	mu        sync.Mutex
	requests  map[uint64]chan *pb.BaseCommand
	producers map[uint64]producerHandler
	consumers map[uint64]consumerHandler
	err       error
	done      chan struct{}
	lastRead  atomic.Int64 // unix nanoseconds
	keepAlive *time.Timer
}

func newConn(c *Client, addr string, nc *upstream.Conn) *conn {
	cn := &conn{client: c, addr: addr, nc: nc, requests: map[uint64]chan *pb.BaseCommand{},
		producers: map[uint64]producerHandler{}, consumers: map[uint64]consumerHandler{}, done: make(chan struct{})}
	cn.lastRead.Store(time.Now().UnixNano())
	cn.keepAlive = time.AfterFunc(c.cfg.KeepAlive, cn.ping)
	go cn.readLoop()
	return cn
}

// ping runs every KeepAlive: a broker silent for two of them is gone.
func (c *conn) ping() {
	ka := c.client.cfg.KeepAlive
	if time.Since(time.Unix(0, c.lastRead.Load())) > 2*ka {
		c.close(fmt.Errorf("broker %s silent for %s", c.addr, 2*ka))
		return
	}
	if c.write(nil, frame.Ping()) == nil {
		c.keepAlive.Reset(ka)
	}
}

func (c *conn) isClosed() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// write sends a command (a frame in buf's room, which is reused).
func (c *conn) write(buf []byte, cmd *pb.BaseCommand) error {
	b, err := frame.AppendCommand(buf, cmd)
	if err != nil {
		return err
	}
	return c.writeFrame(b)
}

// writeFrame sends an encoded frame.
func (c *conn) writeFrame(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.isClosed() {
		return c.closeErr()
	}
	c.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := c.nc.Write(b); err != nil {
		c.close(fmt.Errorf("write to broker %s: %w", c.addr, err))
		return c.closeErr()
	}
	return nil
}

// request sends cmd with a fresh request id and waits for the answer with that id.
// PRODUCER_SUCCESS with producer_ready=false (the producer waits for exclusive access) is
// not the answer yet.
func (c *conn) request(ctx context.Context, cmd *pb.BaseCommand) (*pb.BaseCommand, error) {
	id := c.client.nextID()
	frame.SetRequestID(cmd, id)
	ch := make(chan *pb.BaseCommand, 2)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return nil, c.err
	}
	c.requests[id] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.requests, id)
		c.mu.Unlock()
	}()
	if err := c.write(nil, cmd); err != nil {
		return nil, err
	}
	for {
		select {
		case resp := <-ch:
			if resp.GetType() == pb.BaseCommand_PRODUCER_SUCCESS && resp.GetProducerSuccess().ProducerReady != nil && !resp.GetProducerSuccess().GetProducerReady() {
				continue
			}
			if resp.GetType() == pb.BaseCommand_ERROR {
				return nil, &Error{Code: resp.GetError().GetError(), Message: resp.GetError().GetMessage()}
			}
			return resp, nil
		case <-c.done:
			return nil, c.closeErr()
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (c *conn) addProducer(id uint64, h producerHandler) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return false
	}
	c.producers[id] = h
	return true
}

func (c *conn) addConsumer(id uint64, h consumerHandler) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return false
	}
	c.consumers[id] = h
	return true
}

func (c *conn) removeProducer(id uint64) {
	c.mu.Lock()
	delete(c.producers, id)
	c.mu.Unlock()
}

func (c *conn) removeConsumer(id uint64) {
	c.mu.Lock()
	delete(c.consumers, id)
	c.mu.Unlock()
}

func (c *conn) readLoop() {
	r := c.nc.Reader
	for {
		f, err := r.ReadFrame()
		if err != nil {
			c.close(fmt.Errorf("broker %s connection lost: %w", c.addr, err))
			return
		}
		c.lastRead.Store(time.Now().UnixNano())
		cmd, err := frame.Decode(f.Command)
		if err != nil {
			c.close(fmt.Errorf("broker %s sent a bad frame: %w", c.addr, err))
			return
		}
		if err := c.dispatch(cmd, f.Payload); err != nil {
			c.close(err)
			return
		}
	}
}

// dispatch hands one broker command to whom it is for. payload aliases the reader's buffer.
func (c *conn) dispatch(cmd *pb.BaseCommand, payload []byte) error {
	switch cmd.GetType() {
	case pb.BaseCommand_MESSAGE:
		if h := c.consumer(cmd.GetMessage().GetConsumerId()); h != nil {
			h.message(cmd.GetMessage(), append([]byte(nil), payload...))
		}
	case pb.BaseCommand_SEND_RECEIPT:
		if h := c.producer(cmd.GetSendReceipt().GetProducerId()); h != nil {
			h.receipt(cmd.GetSendReceipt())
		}
	case pb.BaseCommand_SEND_ERROR:
		if h := c.producer(cmd.GetSendError().GetProducerId()); h != nil {
			h.sendError(cmd.GetSendError())
		}
	case pb.BaseCommand_PING:
		return c.write(nil, frame.Pong())
	case pb.BaseCommand_AUTH_CHALLENGE:
		resp, err := c.client.cfg.Connector.AuthResponse(c.addr)
		if err != nil {
			return err
		}
		return c.write(nil, resp)
	case pb.BaseCommand_CLOSE_PRODUCER:
		c.closeProducer(cmd.GetCloseProducer().GetProducerId())
	case pb.BaseCommand_CLOSE_CONSUMER:
		c.closeConsumer(cmd.GetCloseConsumer().GetConsumerId())
	case pb.BaseCommand_TOPIC_MIGRATED:
		t := cmd.GetTopicMigrated()
		if t.GetResourceType() == pb.CommandTopicMigrated_Producer {
			c.closeProducer(t.GetResourceId())
		} else {
			c.closeConsumer(t.GetResourceId())
		}
	case pb.BaseCommand_REACHED_END_OF_TOPIC:
		if h := c.consumer(cmd.GetReachedEndOfTopic().GetConsumerId()); h != nil {
			h.endOfTopic()
		}
	default:
		c.answer(cmd)
	}
	return nil
}

// answer hands a response to the request that waits for it (PONG and the like have none).
func (c *conn) answer(cmd *pb.BaseCommand) {
	id, ok := frame.RequestID(cmd)
	if !ok {
		return
	}
	c.mu.Lock()
	ch := c.requests[id]
	c.mu.Unlock()
	if ch != nil {
		select {
		case ch <- cmd:
		default:
		}
	}
}

func (c *conn) producer(id uint64) producerHandler {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.producers[id]
}

func (c *conn) consumer(id uint64) consumerHandler {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.consumers[id]
}

// closeProducer: the broker closed the producer (an unload): it comes back on its own.
func (c *conn) closeProducer(id uint64) {
	c.mu.Lock()
	h := c.producers[id]
	delete(c.producers, id)
	c.mu.Unlock()
	if h != nil {
		h.disconnected(c)
	}
}

func (c *conn) closeConsumer(id uint64) {
	c.mu.Lock()
	h := c.consumers[id]
	delete(c.consumers, id)
	c.mu.Unlock()
	if h != nil {
		h.disconnected(c)
	}
}

// close ends the connection: its requests fail, its producers and consumers come back
// elsewhere.
func (c *conn) close(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	close(c.done)
	producers, consumers := c.producers, c.consumers
	c.producers, c.consumers = map[uint64]producerHandler{}, map[uint64]consumerHandler{}
	c.mu.Unlock()
	c.keepAlive.Stop()
	c.nc.Close()
	// On a goroutine of its own: close may run where a producer or consumer holds its lock
	// (a write that failed), and each takes it to come back.
	go func() {
		for _, h := range producers {
			h.disconnected(c)
		}
		for _, h := range consumers {
			h.disconnected(c)
		}
	}()
}

func (c *conn) closeErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// flow grants a consumer permits.
func (c *conn) flow(consumerID uint64, n uint32) error {
	return c.write(nil, &pb.BaseCommand{Type: pb.BaseCommand_FLOW.Enum(), Flow: &pb.CommandFlow{
		ConsumerId: proto.Uint64(consumerID), MessagePermits: proto.Uint32(n)}})
}
