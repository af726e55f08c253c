package websocket

import (
	"github.com/pulsar-proxy/pulsar-proxy/authz"
	"github.com/pulsar-proxy/pulsar-proxy/edge"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/pulsarclient"
	"github.com/pulsar-proxy/pulsar-proxy/websocket/wsapi"
)

// maker makes a session's producer or consumer at the brokers, with the client's broker
// connections; it returns how the session then runs.
type maker func(client *pulsarclient.Client) (run func(*session), err error)

// producer reads a producer's parameters; its maker makes it at the brokers.
func (q *request) producer() (maker, error) {
	p, err := wsapi.ParseProducer(q.r.URL.Query())
	if err != nil {
		return nil, err
	}
	opts := pulsarclient.ProducerOptions{Topic: q.endpoint.Topic, Name: p.Name, InitialSequenceID: p.InitialSequenceID,
		SendTimeout: p.SendTimeout, RoundRobin: p.RoutingMode == wsapi.RoundRobinPartition, Murmur3: p.HashingScheme == wsapi.Murmur3Hash,
		Batching: p.Batching, BatchMaxMessages: p.BatchMaxMessages, BatchMaxDelay: p.BatchMaxDelay, Compression: p.Compression}
	for _, k := range p.EncryptionKeys {
		ek := &pb.EncryptionKeys{Key: &k.Name, Value: k.Value}
		for mk, mv := range k.Metadata {
			ek.Metadata = append(ek.Metadata, &pb.KeyValue{Key: &mk, Value: &mv})
		}
		opts.EncryptionKeys = append(opts.EncryptionKeys, ek)
	}
	pending := q.s.cfg.MaxPendingMessages
	if p.MaxPending > 0 && p.MaxPending < pending {
		pending = p.MaxPending
	}
	return func(client *pulsarclient.Client) (func(*session), error) {
		producer, err := client.CreateProducer(q.r.Context(), opts)
		if err != nil {
			return nil, createError(wsapi.Producer, err)
		}
		return func(ss *session) { ss.produce(producer, pending) }, nil
	}, nil
}

// consumer reads a consumer's parameters; its maker subscribes at the brokers.
func (q *request) consumer() (maker, error) {
	e := q.endpoint
	c, err := wsapi.ParseConsumer(q.r.URL.Query(), e.Topic, e.Subscription)
	if err != nil {
		return nil, err
	}
	// The dead-letter topic is written in the role's name: the role must be let produce there.
	if c.DeadLetterTopic != "" {
		if d := q.s.cfg.Policy.WebSocket(q.id, authz.ActionProduce, c.DeadLetterTopic); d.Outcome != edge.Forward {
			return nil, &wsapi.Refusal{Status: d.Status, Message: d.Message}
		}
	}
	opts := pulsarclient.ConsumerOptions{Topic: e.Topic, Subscription: e.Subscription, Type: c.Type, Durable: c.Durable,
		InitialPosition: c.InitialPosition, Name: c.Name, Priority: c.PriorityLevel, QueueSize: c.ReceiverQueueSize,
		MaxQueuedBytes: q.s.cfg.MaxBufferedBytes, AckTimeout: c.AckTimeout, NackDelay: c.NegativeAckDelay,
		MaxRedeliverCount: c.MaxRedeliverCount, DeadLetterTopic: c.DeadLetterTopic,
		CryptoConsume: c.CryptoFailure == wsapi.CryptoConsume, CryptoDiscard: c.CryptoFailure == wsapi.CryptoDiscard}
	pending := max(c.ReceiverQueueSize, 1)
	return func(client *pulsarclient.Client) (func(*session), error) {
		co, err := client.Subscribe(q.r.Context(), opts)
		if err != nil {
			return nil, createError(wsapi.Consumer, err)
		}
		return func(ss *session) { ss.consume(co, c.PullMode, pending, false) }, nil
	}, nil
}

// reader reads a reader's parameters; its maker makes it at the brokers.
func (q *request) reader() (maker, error) {
	p, err := wsapi.ParseReader(q.r.URL.Query())
	if err != nil {
		return nil, err
	}
	start := &pulsarclient.Start{Earliest: p.Start.Earliest}
	if id := p.Start.ID; id != nil {
		sid := clientID(*id)
		start.ID = &sid
	}
	opts := pulsarclient.ConsumerOptions{Topic: q.endpoint.Topic, Name: p.Name, QueueSize: p.ReceiverQueueSize,
		MaxQueuedBytes: q.s.cfg.MaxBufferedBytes, Start: start,
		CryptoConsume: p.CryptoFailure == wsapi.CryptoConsume, CryptoDiscard: p.CryptoFailure == wsapi.CryptoDiscard}
	pending := max(p.ReceiverQueueSize, 1)
	return func(client *pulsarclient.Client) (func(*session), error) {
		co, err := client.Subscribe(q.r.Context(), opts)
		if err != nil {
			return nil, createError(wsapi.Reader, err)
		}
		return func(ss *session) { ss.consume(co, false, pending, true) }, nil
	}, nil
}
