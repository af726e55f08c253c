package websocket

import (
	"context"
	"errors"
	"sync"

	"github.com/coder/websocket"

	"github.com/pulsar-proxy/pulsar-proxy/internal/pulsarclient"
	"github.com/pulsar-proxy/pulsar-proxy/websocket/wsapi"
)

// consume delivers messages to the client and takes its commands. In push mode at most
// pending messages are delivered and not yet acknowledged; in pull mode as many as the
// client permitted. A reader's client acknowledges with any message (the proxy does not
// acknowledge for a reader).
func (ss *session) consume(co *pulsarclient.Consumer, pull bool, pending int, reader bool) {
	defer co.Close()
	g := &gate{pull: pull, max: pending, wake: make(chan struct{}, 1)}
	go ss.deliver(co, g)
	var buf []byte
	for {
		var err error
		if buf, err = ss.read(buf); err != nil {
			return
		}
		cmd, err := wsapi.DecodeConsumerCommand(buf)
		if err != nil {
			ss.closeWith(wsapi.FailedToDeserializeFromJSON, "")
			return
		}
		if reader {
			if cmd.Type == "isEndOfTopic" {
				ss.write(wsapi.EndOfTopicJSON(co.ReachedEnd()))
				continue
			}
			g.acked()
			continue
		}
		if !ss.command(co, g, cmd) {
			return
		}
	}
}

// command carries out a consumer's command; false ends the session.
func (ss *session) command(co *pulsarclient.Consumer, g *gate, cmd wsapi.ConsumerCommand) bool {
	switch cmd.Type {
	case "permit":
		if cmd.PermitMessages == nil {
			ss.closeWith(wsapi.FailedToDeserializeFromJSON, "Missing required permitMessages field for 'permit' command")
			return false
		}
		g.permit(int(*cmd.PermitMessages))
	case "unsubscribe":
		ctx, cancel := context.WithTimeout(ss.ctx, ss.s.cfg.unsubscribeTimeout())
		err := co.Unsubscribe(ctx)
		cancel()
		if err != nil {
			ss.log.Debug().Err(err).Msg("unsubscribe failed")
		}
	case "isEndOfTopic":
		ss.write(wsapi.EndOfTopicJSON(co.ReachedEnd()))
	default: // an ack, or a negative one
		id, err := messageID(cmd.MessageID)
		if err != nil {
			// As the service: no id or one not in base64 is an internal error there (1011);
			// base64 that is no MessageIdData, its FailedToDeserializeFromJSON.
			if errors.Is(err, wsapi.ErrNotMessageID) {
				ss.closeWith(wsapi.FailedToDeserializeFromJSON, err.Error())
			} else {
				ss.close(websocket.StatusInternalError, err.Error())
			}
			return false
		}
		if cmd.Type == "negativeAcknowledge" {
			co.Nack(id)
		} else {
			co.Ack(id)
		}
		g.acked()
	}
	return true
}

func messageID(s *string) (pulsarclient.MessageID, error) {
	if s == nil {
		return pulsarclient.MessageID{}, errors.New("no messageId")
	}
	id, err := wsapi.DecodeMessageID(*s)
	if err != nil {
		return pulsarclient.MessageID{}, err
	}
	return clientID(id), nil
}

// deliver writes messages to the client as the gate lets them through.
func (ss *session) deliver(co *pulsarclient.Consumer, g *gate) {
	loc := ss.s.cfg.Location
	var buf []byte
	for {
		if !g.wait(ss.ctx) {
			return
		}
		m, err := co.Receive(ss.ctx)
		if err != nil {
			if errors.Is(err, pulsarclient.ErrConsumerFailed) {
				ss.log.Info().Err(err).Msg("consumer gave up; closing the session")
				ss.close(websocket.StatusInternalError, "consumer ended: "+err.Error())
			}
			return
		}
		cm := wsapi.ConsumerMessage{ID: encodeID(m.ID), Payload: m.Payload, Properties: m.Properties,
			PublishTime: wsapi.FormatTime(int64(m.PublishTime), loc), RedeliveryCount: m.RedeliveryCount, Key: m.Key, HasKey: m.HasKey}
		if m.EventTime != 0 {
			cm.EventTime = wsapi.FormatTime(int64(m.EventTime), loc)
		}
		if m.Encryption != nil {
			cm.Encryption = encryptionContext(m)
		}
		buf = cm.AppendJSON(buf[:0])
		if ss.write(buf) != nil {
			ss.cancel()
			return
		}
		g.took()
		ss.s.metrics.messages.WithLabelValues(dirDelivered).Inc()
		ss.s.metrics.bytes.WithLabelValues(dirDelivered).Add(float64(len(m.Payload)))
	}
}

func encryptionContext(m *pulsarclient.Message) *wsapi.EncryptionContext {
	md := m.Encryption
	e := &wsapi.EncryptionContext{Param: md.GetEncryptionParam(), Algorithm: md.GetEncryptionAlgo(),
		CompressionType: md.GetCompression().String(), UncompressedMessageSize: md.GetUncompressedSize(), BatchSize: md.GetNumMessagesInBatch()}
	if md.NumMessagesInBatch == nil {
		e.BatchSize = 0
	}
	for _, k := range md.GetEncryptionKeys() {
		meta := map[string]string{}
		for _, kv := range k.GetMetadata() {
			meta[kv.GetKey()] = kv.GetValue()
		}
		e.Keys = append(e.Keys, wsapi.EncryptionKey{Name: k.GetKey(), Value: k.GetValue(), Metadata: meta})
	}
	return e
}

// gate lets deliveries through: in push mode while fewer than max are unacknowledged (acks
// of unknown ids count too, as the service counts them), in pull mode while permits last.
type gate struct {
	mu      sync.Mutex
	pull    bool
	max     int
	pending int
	permits int
	wake    chan struct{}
}

func (g *gate) open() bool {
	if g.pull {
		return g.permits > 0
	}
	return g.pending < g.max
}

func (g *gate) wait(ctx context.Context) bool {
	for {
		g.mu.Lock()
		ok := g.open()
		g.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-g.wake:
		case <-ctx.Done():
			return false
		}
	}
}

func (g *gate) took() {
	g.mu.Lock()
	if g.pull {
		g.permits--
	} else {
		g.pending++
	}
	g.mu.Unlock()
}

func (g *gate) acked() {
	g.mu.Lock()
	if !g.pull {
		g.pending--
	}
	g.mu.Unlock()
	g.signal()
}

func (g *gate) permit(n int) {
	g.mu.Lock()
	if g.pull {
		g.permits += n
	}
	g.mu.Unlock()
	g.signal()
}

func (g *gate) signal() {
	select {
	case g.wake <- struct{}{}:
	default:
	}
}
