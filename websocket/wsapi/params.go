package wsapi

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// MaxReceiverQueueSize caps a consumer's or reader's receiverQueueSize, as the service does.
const MaxReceiverQueueSize = 1000

// HashingScheme picks a partition from a message key.
type HashingScheme uint8

const (
	JavaStringHash HashingScheme = iota
	Murmur3Hash
)

// RoutingMode is how a producer spreads messages without a key over a partitioned topic's
// partitions (keyed messages always go by the key's hash).
type RoutingMode uint8

const (
	SinglePartition RoutingMode = iota // one partition, picked at random, for all of them
	RoundRobinPartition
)

// CryptoFailureAction is what a consumer does with a message it cannot decrypt (the proxy
// holds no keys, so: any encrypted message).
type CryptoFailureAction uint8

const (
	CryptoFail    CryptoFailureAction = iota // not delivered
	CryptoDiscard                            // acknowledged and dropped
	CryptoConsume                            // delivered as it is, with its encryption context
)

// ProducerParams are a producer's query parameters, with Pulsar's defaults.
type ProducerParams struct {
	Name              string // producerName; "" lets the broker name it
	InitialSequenceID int64  // initialSequenceId; -1: the broker's last one
	HashingScheme     HashingScheme
	SendTimeout       time.Duration // sendTimeoutMillis; 0: none
	RoutingMode       RoutingMode
	Batching          bool
	BatchMaxMessages  int           // batchingMaxMessages
	BatchMaxDelay     time.Duration // batchingMaxPublishDelay
	MaxPending        int           // maxPendingMessages (with batching); 0: the proxy's bound
	Compression       pb.CompressionType
	// EncryptionKeys, when set, are the keys of messages the client encrypted itself
	// (encryptionKeys as base64 JSON): they go in every message's metadata, with batching
	// and compression off.
	EncryptionKeys []EncryptionKey
}

// EncryptionKey is one key of a client-side encrypted message's metadata.
type EncryptionKey struct {
	Name     string
	Value    []byte
	Metadata map[string]string
}

// ParseProducer reads a producer's query parameters. A bad one is a *Refusal (400).
func ParseProducer(q url.Values) (ProducerParams, error) {
	p := ProducerParams{InitialSequenceID: -1, SendTimeout: 30 * time.Second, BatchMaxMessages: 1000, BatchMaxDelay: time.Millisecond}
	r := params{q: q}
	if v, ok := r.get("producerName"); ok {
		if strings.TrimSpace(v) == "" {
			return p, invalid("producerName cannot be blank")
		}
		p.Name = v
	}
	r.int64("initialSequenceId", &p.InitialSequenceID)
	if v, ok := r.get("hashingScheme"); ok {
		switch v {
		case "JavaStringHash":
		case "Murmur3_32Hash":
			p.HashingScheme = Murmur3Hash
		default:
			r.fail("No enum constant org.apache.pulsar.client.api.HashingScheme." + v)
		}
	}
	r.millis("sendTimeoutMillis", &p.SendTimeout)
	if v, ok := r.get("messageRoutingMode"); ok {
		switch v {
		case "SinglePartition", "CustomPartition":
		case "RoundRobinPartition":
			p.RoutingMode = RoundRobinPartition
		default:
			r.fail("Invalid messageRoutingMode " + v)
		}
	}
	if keys, ok := clientKeys(q); ok {
		p.EncryptionKeys = keys
		return p, r.err
	}
	r.batching(&p)
	if v, ok := r.get("compressionType"); ok {
		c, known := pb.CompressionType_value[v]
		if !known {
			r.fail("Invalid compressionType " + v)
		}
		p.Compression = pb.CompressionType(c)
	}
	if _, ok := r.get("encryptionKeys"); ok && r.err == nil {
		// Keys by name need the service's key reader; the proxy has none.
		return p, &Refusal{Status: http.StatusInternalServerError,
			Message: "Failed to create producer: Can't add encryption key without configuring cryptoKeyReaderFactoryClassName"}
	}
	return p, r.err
}

// batching reads the batching parameters, which apply only with batchingEnabled=true.
func (r *params) batching(p *ProducerParams) {
	v, ok := r.get("batchingEnabled")
	p.Batching = ok && strings.EqualFold(v, "true")
	if !p.Batching {
		return
	}
	r.int("batchingMaxMessages", &p.BatchMaxMessages)
	r.int("maxPendingMessages", &p.MaxPending)
	r.millis("batchingMaxPublishDelay", &p.BatchMaxDelay)
	if p.BatchMaxMessages < 1 {
		r.fail("batchingMaxMessages must be at least 1")
	}
	if p.MaxPending < 0 {
		r.fail("maxPendingMessages needs to be >= 0")
	}
}

// ConsumerParams are a consumer's query parameters, with Pulsar's defaults.
type ConsumerParams struct {
	AckTimeout        time.Duration // ackTimeoutMillis; 0: none
	Type              pb.CommandSubscribe_SubType
	Durable           bool // subscriptionMode Durable (the default) or NonDurable
	InitialPosition   pb.CommandSubscribe_InitialPosition
	ReceiverQueueSize int // at most MaxReceiverQueueSize
	Name              string
	PriorityLevel     int32
	NegativeAckDelay  time.Duration // negativeAckRedeliveryDelay
	// MaxRedeliverCount > 0 sends a message redelivered that often to DeadLetterTopic.
	MaxRedeliverCount int
	DeadLetterTopic   string
	CryptoFailure     CryptoFailureAction
	PullMode          bool
}

// deadLetterAckTimeout is the ack timeout a dead-letter policy brings when none is set.
const deadLetterAckTimeout = 30 * time.Second

// ParseConsumer reads a consumer's query parameters for topic and subscription. A bad one
// is a *Refusal (400).
func ParseConsumer(q url.Values, topic, subscription string) (ConsumerParams, error) {
	c := ConsumerParams{Durable: true, ReceiverQueueSize: MaxReceiverQueueSize, NegativeAckDelay: time.Minute}
	r := params{q: q}
	r.millis("ackTimeoutMillis", &c.AckTimeout)
	if c.AckTimeout != 0 && c.AckTimeout < time.Second {
		r.fail("Ack timeout should be greater than 1000 ms")
	}
	if v, ok := r.get("subscriptionType"); ok {
		t, known := pb.CommandSubscribe_SubType_value[v]
		if !known {
			r.fail("Invalid subscriptionType " + v)
		}
		c.Type = pb.CommandSubscribe_SubType(t)
	}
	if v, ok := r.get("subscriptionMode"); ok {
		switch v {
		case "Durable":
		case "NonDurable":
			c.Durable = false
		default:
			r.fail("Invalid subscriptionMode " + v)
		}
	}
	if v, ok := r.get("subscriptionInitialPosition"); ok {
		switch v {
		case "Latest":
		case "Earliest":
			c.InitialPosition = pb.CommandSubscribe_Earliest
		default:
			r.fail("Invalid subscriptionInitialPosition " + v)
		}
	}
	r.queueSize(&c.ReceiverQueueSize)
	r.name("consumerName", &c.Name)
	var prio int
	r.int("priorityLevel", &prio)
	c.PriorityLevel = int32(prio)
	if prio < 0 {
		r.fail("priorityLevel needs to be >= 0")
	}
	r.millis("negativeAckRedeliveryDelay", &c.NegativeAckDelay)
	r.deadLetter(&c, topic, subscription)
	c.CryptoFailure = cryptoAction(q)
	v, _ := r.get("pullMode")
	c.PullMode = strings.EqualFold(v, "true")
	return c, r.err
}

// deadLetter reads maxRedeliverCount and deadLetterTopic: the topic defaults to
// <topic>-<subscription>-DLQ, and the policy brings an ack timeout when none was set.
func (r *params) deadLetter(c *ConsumerParams, topic, subscription string) {
	_, hasCount := r.get("maxRedeliverCount")
	dlq, hasTopic := r.get("deadLetterTopic")
	if !hasCount && !hasTopic {
		return
	}
	if hasCount {
		r.int("maxRedeliverCount", &c.MaxRedeliverCount)
		c.DeadLetterTopic = topic + "-" + subscription + "-DLQ"
	}
	if hasTopic {
		c.DeadLetterTopic = dlq
	}
	if c.MaxRedeliverCount <= 0 {
		r.fail("MaxRedeliverCount must be > 0.")
	}
	if c.AckTimeout == 0 {
		c.AckTimeout = deadLetterAckTimeout
	}
}

// Start is where a reader starts: the earliest message, the next one (latest), or just after
// a message id.
type Start struct {
	Earliest bool
	ID       *MessageID // nil with Earliest or for the latest
}

// ReaderParams are a reader's query parameters.
type ReaderParams struct {
	ReceiverQueueSize int
	Name              string
	CryptoFailure     CryptoFailureAction
	Start             Start
}

// ParseReader reads a reader's query parameters. The service refuses a bad one with 500
// (its reader is created or fails as a whole), so the *Refusal says 500 too.
func ParseReader(q url.Values) (ReaderParams, error) {
	p := ReaderParams{ReceiverQueueSize: MaxReceiverQueueSize}
	r := params{q: q}
	r.queueSize(&p.ReceiverQueueSize)
	r.name("readerName", &p.Name)
	p.CryptoFailure = cryptoAction(q)
	switch v, _ := r.get("messageId"); strings.TrimSpace(v) {
	case "", "latest":
	case "earliest":
		p.Start.Earliest = true
	default:
		id, err := DecodeMessageID(v)
		if err != nil {
			r.fail("messageId: " + err.Error())
		}
		p.Start.ID = &id
	}
	if r.err != nil {
		return p, &Refusal{Status: http.StatusInternalServerError, Message: "Failed to create reader: " + r.err.(*Refusal).Message}
	}
	return p, nil
}

func cryptoAction(q url.Values) CryptoFailureAction {
	switch q.Get("cryptoFailureAction") {
	case "DISCARD":
		return CryptoDiscard
	case "CONSUME":
		return CryptoConsume
	}
	return CryptoFail // FAIL, and what the service ignores with a warning
}

// params reads query parameters as the service does (the first value of each; numbers as
// Java's Integer.parseInt and Long.parseLong read them), keeping the first error.
type params struct {
	q   url.Values
	err error
}

func (r *params) get(key string) (string, bool) {
	v, ok := r.q[key]
	if !ok || len(v) == 0 {
		return "", false
	}
	return v[0], true
}

func (r *params) fail(msg string) {
	if r.err == nil {
		r.err = invalid(msg)
	}
}

func (r *params) int(key string, dst *int) {
	if v, ok := r.get(key); ok {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil {
			r.fail(`For input string: "` + v + `"`)
			return
		}
		*dst = int(n)
	}
}

func (r *params) int64(key string, dst *int64) {
	if v, ok := r.get(key); ok {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			r.fail(`For input string: "` + v + `"`)
			return
		}
		*dst = n
	}
}

// millis reads a non-negative number of milliseconds.
func (r *params) millis(key string, dst *time.Duration) {
	n := -1
	if _, ok := r.get(key); !ok {
		return
	}
	r.int(key, &n)
	if r.err != nil {
		return
	}
	if n < 0 {
		r.fail(key + " needs to be >= 0")
		return
	}
	*dst = time.Duration(n) * time.Millisecond
}

func (r *params) queueSize(dst *int) {
	n := *dst
	r.int("receiverQueueSize", &n)
	if n < 0 {
		r.fail("receiverQueueSize needs to be >= 0")
	}
	*dst = min(n, MaxReceiverQueueSize)
}

func (r *params) name(key string, dst *string) {
	if v, ok := r.get(key); ok {
		if strings.TrimSpace(v) == "" {
			r.fail(key + " cannot be blank")
		}
		*dst = v
	}
}

func invalid(msg string) *Refusal {
	return &Refusal{Status: http.StatusBadRequest, Message: "Invalid query params: " + msg}
}
