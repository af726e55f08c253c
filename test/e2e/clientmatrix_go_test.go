package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
)

// The Go column of the client feature matrix: each feature with pulsar-client-go, as the Java
// and Python programs do it (testdata/MatrixClient.java, testdata/matrixclient.py).

// errUnsupported marks a feature pulsar-client-go has no API for.
type errUnsupported string

func (e errUnsupported) Error() string { return string(e) }

// mxGoFeature runs one feature with a client of env.URL (c) on topics named from env.Prefix.
type mxGoFeature func(ctx context.Context, c pulsar.Client, env matrixEnv) error

var mxGoFeatures = map[string]mxGoFeature{
	"produce-consume": func(ctx context.Context, c pulsar.Client, e matrixEnv) error {
		return mxRoundtrip(ctx, c, e.Prefix+"-pc", 20)
	},
	"partitioned":        mxPartitioned,
	"sub-exclusive":      mxSubExclusive,
	"sub-shared":         mxSubShared,
	"sub-failover":       mxSubFailover,
	"sub-key-shared":     mxSubKeyShared,
	"batching-on":        func(ctx context.Context, c pulsar.Client, e matrixEnv) error { return mxBatching(ctx, c, e, true) },
	"batching-off":       func(ctx context.Context, c pulsar.Client, e matrixEnv) error { return mxBatching(ctx, c, e, false) },
	"compression-lz4":    mxCompression(pulsar.LZ4, "lz4"),
	"compression-zlib":   mxCompression(pulsar.ZLib, "zlib"),
	"compression-zstd":   mxCompression(pulsar.ZSTD, "zstd"),
	"compression-snappy": mxCompression(pulsar.SNAPPY, "snappy"),
	"schema-json":        mxSchema("json", func(def string) pulsar.Schema { return pulsar.NewJSONSchema(def, nil) }),
	"schema-avro":        mxSchema("avro", func(def string) pulsar.Schema { return pulsar.NewAvroSchema(def, nil) }),
	"regex-polling":      mxRegexPolling,
	"regex-watcher": func(context.Context, pulsar.Client, matrixEnv) error {
		return errUnsupported("pulsar-client-go has no topic-list watcher (it never sends WATCH_TOPIC_LIST); pattern consumers only poll")
	},
	"reader":           mxReader,
	"seek-id":          mxSeekID,
	"seek-time":        mxSeekTime,
	"nack-redelivery":  mxNack,
	"dead-letter":      mxDeadLetter,
	"retry-topic":      mxRetryTopic,
	"delayed-delivery": mxDelayed,
	"non-persistent": func(ctx context.Context, c pulsar.Client, e matrixEnv) error {
		return mxRoundtrip(ctx, c, strings.Replace(e.Prefix, "persistent://", "non-persistent://", 1)+"-np", 20)
	},
	"exclusive-producer": mxExclusiveProducer,
	"termination": func(context.Context, pulsar.Client, matrixEnv) error {
		return errUnsupported("pulsar-client-go ignores REACHED_END_OF_TOPIC and its Consumer has no HasReachedEndOfTopic")
	},
	"transactions":  mxTransactions,
	"chunking":      mxChunking,
	"token-refresh": mxTokenRefresh,
	"tls":           mxTLS,
	"mtls":          mxMTLS,
}

// runGoFeature runs feature id with a fresh client of env.URL, within 90 s.
func runGoFeature(ctx context.Context, env matrixEnv, id string) cell {
	f, ok := mxGoFeatures[id]
	if !ok {
		return cell{Result: cellUnsupported, Detail: "no such feature in the Go column"}
	}
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	c, err := mxClientOf(pulsar.ClientOptions{URL: env.URL})
	if err != nil {
		return cell{Result: cellFail, Detail: err.Error()}
	}
	defer c.Close()
	err = f(ctx, c, env)
	var unsupported errUnsupported
	switch {
	case err == nil:
		return cell{Result: cellPass}
	case errors.As(err, &unsupported):
		return cell{Result: cellUnsupported, Detail: err.Error()}
	default:
		return cell{Result: cellFail, Detail: err.Error()}
	}
}

func mxClientOf(o pulsar.ClientOptions) (pulsar.Client, error) {
	o.OperationTimeout, o.ConnectionTimeout, o.Logger = 30*time.Second, 10*time.Second, plog.DefaultNopLogger()
	return pulsar.NewClient(o)
}

func mPayload(i int) []byte { return fmt.Appendf(nil, "m-%d", i) }

func mxSubscribe(c pulsar.Client, topic, name string, typ pulsar.SubscriptionType, more ...func(*pulsar.ConsumerOptions)) (pulsar.Consumer, error) {
	o := pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: typ, Name: name,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest}
	for _, f := range more {
		f(&o)
	}
	return c.Subscribe(o)
}

func mxReceive(ctx context.Context, c pulsar.Consumer, what string) (pulsar.Message, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	m, err := c.Receive(ctx)
	if err != nil {
		return nil, fmt.Errorf("no message within 30 s: %s: %w", what, err)
	}
	return m, nil
}

// mxExpectInOrder receives m-from .. m-(n-1) in order, acknowledging each.
func mxExpectInOrder(ctx context.Context, c pulsar.Consumer, from, n int) error {
	for i := from; i < n; i++ {
		m, err := mxReceive(ctx, c, fmt.Sprint("message ", i))
		if err != nil {
			return err
		}
		if !bytes.Equal(m.Payload(), mPayload(i)) {
			return fmt.Errorf("got %q, want m-%d", m.Payload(), i)
		}
		c.Ack(m)
	}
	return nil
}

// mxProduceN sends m-0 .. m-(n-1) without batching and returns their ids.
func mxProduceN(ctx context.Context, c pulsar.Client, topic string, n int) ([]pulsar.MessageID, error) {
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		return nil, err
	}
	defer p.Close()
	var ids []pulsar.MessageID
	for i := range n {
		id, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: mPayload(i)})
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, nil
}

func mxRoundtrip(ctx context.Context, c pulsar.Client, topic string, n int) error {
	cons, err := mxSubscribe(c, topic, "", pulsar.Exclusive)
	if err != nil {
		return err
	}
	defer cons.Close()
	if _, err := mxProduceN(ctx, c, topic, n); err != nil {
		return err
	}
	return mxExpectInOrder(ctx, cons, 0, n)
}

func mxPartitioned(ctx context.Context, c pulsar.Client, e matrixEnv) error {
	cons, err := mxSubscribe(c, e.Partitioned, "", pulsar.Shared)
	if err != nil {
		return err
	}
	defer cons.Close()
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: e.Partitioned, DisableBatching: true})
	if err != nil {
		return err
	}
	defer p.Close()
	for i := range 20 {
		// No key: pulsar-client-go's default router goes round robin over the partitions.
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: mPayload(i)}); err != nil {
			return err
		}
	}
	got, parts := map[string]bool{}, map[string]bool{}
	for len(got) < 20 {
		m, err := mxReceive(ctx, cons, fmt.Sprint("partitioned, after ", len(got)))
		if err != nil {
			return err
		}
		got[string(m.Payload())], parts[m.Topic()] = true, true
		cons.Ack(m)
	}
	if len(parts) != 2 {
		return fmt.Errorf("messages from partitions %v, want both", parts)
	}
	return nil
}

func mxSubExclusive(ctx context.Context, c pulsar.Client, e matrixEnv) error {
	topic := e.Prefix + "-excl"
	cons, err := mxSubscribe(c, topic, "", pulsar.Exclusive)
	if err != nil {
		return err
	}
	defer cons.Close()
	if second, err := mxSubscribe(c, topic, "", pulsar.Exclusive); err == nil {
		second.Close()
		return errors.New("a second consumer joined an Exclusive subscription")
	}
	if _, err := mxProduceN(ctx, c, topic, 10); err != nil {
		return err
	}
	return mxExpectInOrder(ctx, cons, 0, 10)
}

// mxTwo subscribes two consumers, a and b, to one subscription of type typ.
func mxTwo(c pulsar.Client, topic string, typ pulsar.SubscriptionType) ([]pulsar.Consumer, error) {
	var cs []pulsar.Consumer
	for _, name := range []string{"a", "b"} {
		cons, err := mxSubscribe(c, topic, name, typ)
		if err != nil {
			mxCloseAll(cs)
			return nil, err
		}
		cs = append(cs, cons)
	}
	return cs, nil
}

func mxCloseAll(cs []pulsar.Consumer) {
	for _, c := range cs {
		c.Close()
	}
}

// mxSendKeyed sends m-0 .. m-(n-1) with keys k0 .. k(keys-1) in turn.
func mxSendKeyed(ctx context.Context, c pulsar.Client, topic string, n, keys int) error {
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		return err
	}
	defer p.Close()
	for i := range n {
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: mPayload(i), Key: fmt.Sprint("k", i%keys)}); err != nil {
			return err
		}
	}
	return nil
}

// mxCollect receives n distinct messages from the consumers: which consumer got each
// (payload|key).
func mxCollect(ctx context.Context, cs []pulsar.Consumer, n int) (map[string]int, error) {
	by := map[string]int{}
	deadline := time.Now().Add(30 * time.Second)
	for len(by) < n {
		if time.Now().After(deadline) {
			return by, fmt.Errorf("received %d of %d in 30 s", len(by), n)
		}
		for k, c := range cs {
			rctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			m, err := c.Receive(rctx)
			cancel()
			if err == nil {
				by[string(m.Payload())+"|"+m.Key()] = k
				c.Ack(m)
			}
		}
	}
	return by, nil
}

// mxShareOut sends n keyed messages to two consumers of one subscription and says which
// consumer got each.
func mxShareOut(ctx context.Context, c pulsar.Client, topic string, typ pulsar.SubscriptionType, n, keys int) (map[string]int, error) {
	cs, err := mxTwo(c, topic, typ)
	if err != nil {
		return nil, err
	}
	defer mxCloseAll(cs)
	if err := mxSendKeyed(ctx, c, topic, n, keys); err != nil {
		return nil, err
	}
	return mxCollect(ctx, cs, n)
}

func consumersUsed(by map[string]int) map[int]bool {
	used := map[int]bool{}
	for _, k := range by {
		used[k] = true
	}
	return used
}

func mxSubShared(ctx context.Context, c pulsar.Client, e matrixEnv) error {
	by, err := mxShareOut(ctx, c, e.Prefix+"-shared", pulsar.Shared, 40, 40)
	if err != nil {
		return err
	}
	if len(consumersUsed(by)) != 2 {
		return errors.New("one consumer got all 40 messages")
	}
	return nil
}

func mxSubFailover(ctx context.Context, c pulsar.Client, e matrixEnv) error {
	by, err := mxShareOut(ctx, c, e.Prefix+"-failover", pulsar.Failover, 20, 20)
	if err != nil {
		return err
	}
	if len(consumersUsed(by)) != 1 {
		return errors.New("both consumers of a Failover subscription got messages")
	}
	return nil
}

func mxSubKeyShared(ctx context.Context, c pulsar.Client, e matrixEnv) error {
	by, err := mxShareOut(ctx, c, e.Prefix+"-keyshared", pulsar.KeyShared, 40, 8)
	if err != nil {
		return err
	}
	owner := map[string]int{}
	for pk, k := range by {
		_, key, _ := strings.Cut(pk, "|")
		if prev, ok := owner[key]; ok && prev != k {
			return fmt.Errorf("key %s went to both consumers", key)
		}
		owner[key] = k
	}
	return nil
}

// mxSendAsync sends payloads asynchronously, then flushes and waits for every receipt.
func mxSendAsync(ctx context.Context, p pulsar.Producer, payloads [][]byte) error {
	errs := make(chan error, len(payloads))
	for _, b := range payloads {
		p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: b}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) { errs <- err })
	}
	if err := p.FlushWithCtx(ctx); err != nil {
		return err
	}
	for range payloads {
		if err := <-errs; err != nil {
			return err
		}
	}
	return nil
}

func mxBatching(ctx context.Context, c pulsar.Client, e matrixEnv, on bool) error {
	topic := e.Prefix + map[bool]string{true: "-batch-on", false: "-batch-off"}[on]
	cons, err := mxSubscribe(c, topic, "", pulsar.Exclusive)
	if err != nil {
		return err
	}
	defer cons.Close()
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: !on, BatchingMaxPublishDelay: 200 * time.Millisecond})
	if err != nil {
		return err
	}
	defer p.Close()
	var payloads [][]byte
	for i := range 50 {
		payloads = append(payloads, mPayload(i))
	}
	if err := mxSendAsync(ctx, p, payloads); err != nil {
		return err
	}
	batched := 0
	for i := range 50 {
		m, err := mxReceive(ctx, cons, fmt.Sprint("message ", i))
		if err != nil {
			return err
		}
		if !bytes.Equal(m.Payload(), mPayload(i)) {
			return fmt.Errorf("got %q, want m-%d", m.Payload(), i)
		}
		if m.ID().BatchIdx() >= 0 && m.ID().BatchSize() > 1 {
			batched++
		}
		cons.Ack(m)
	}
	if (on && batched == 0) || (!on && batched != 0) {
		return fmt.Errorf("%d of 50 messages arrived in batches", batched)
	}
	return nil
}

func mxCompression(kind pulsar.CompressionType, name string) mxGoFeature {
	return func(ctx context.Context, c pulsar.Client, e matrixEnv) error {
		topic := e.Prefix + "-compress-" + name
		filler := strings.Repeat("compressible ", 100)
		cons, err := mxSubscribe(c, topic, "", pulsar.Exclusive)
		if err != nil {
			return err
		}
		defer cons.Close()
		p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, CompressionType: kind})
		if err != nil {
			return err
		}
		defer p.Close()
		var payloads [][]byte
		for i := range 20 {
			payloads = append(payloads, fmt.Appendf(nil, "m-%d%s", i, filler))
		}
		if err := mxSendAsync(ctx, p, payloads); err != nil {
			return err
		}
		for i := range 20 {
			m, err := mxReceive(ctx, cons, fmt.Sprint("message ", i))
			if err != nil {
				return err
			}
			if !bytes.Equal(m.Payload(), payloads[i]) {
				return fmt.Errorf("message %d arrived altered", i)
			}
		}
		return nil
	}
}

// matrixRec is the schema features' record; recSchemaDef is its Avro definition (the JSON
// schema of Pulsar is an Avro definition too).
type matrixRec struct {
	Name string `json:"name" avro:"name"`
	N    int    `json:"n" avro:"n"`
}

const recSchemaDef = `{"type":"record","name":"Rec","namespace":"matrix","fields":[{"name":"name","type":"string"},{"name":"n","type":"int"}]}`

// mxSchema: a consumer of the schema subscribes (the broker records the schema); a producer
// without a schema then sends a typed message, for which the client asks for the schema's
// version with GET_OR_CREATE_SCHEMA; the consumer decodes it.
func mxSchema(name string, schema func(def string) pulsar.Schema) mxGoFeature {
	return func(ctx context.Context, c pulsar.Client, e matrixEnv) error {
		topic := e.Prefix + "-schema-" + name
		cons, err := mxSubscribe(c, topic, "", pulsar.Exclusive, func(o *pulsar.ConsumerOptions) { o.Schema = schema(recSchemaDef) })
		if err != nil {
			return err
		}
		defer cons.Close()
		p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic})
		if err != nil {
			return err
		}
		defer p.Close()
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Value: &matrixRec{"alice", 7}, Schema: schema(recSchemaDef)}); err != nil {
			return err
		}
		m, err := mxReceive(ctx, cons, "the typed message")
		if err != nil {
			return err
		}
		var got matrixRec
		if err := m.GetSchemaValue(&got); err != nil {
			return err
		}
		if got != (matrixRec{"alice", 7}) || len(m.SchemaVersion()) == 0 {
			return fmt.Errorf("decoded %+v, schema version %x", got, m.SchemaVersion())
		}
		return nil
	}
}

func mxRegexPolling(ctx context.Context, c pulsar.Client, e matrixEnv) error {
	base := e.Prefix + "-rp"
	cons, err := c.Subscribe(pulsar.ConsumerOptions{TopicsPattern: base + "-.*", SubscriptionName: "s",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, AutoDiscoveryPeriod: time.Second})
	if err != nil {
		return err
	}
	defer cons.Close()
	if _, err := mxProduceN(ctx, c, base+"-late", 1); err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	m, err := cons.Receive(rctx)
	if err != nil {
		return fmt.Errorf("the topic created after subscribing was not consumed within 60 s: %w", err)
	}
	if !bytes.Equal(m.Payload(), mPayload(0)) {
		return fmt.Errorf("got %q", m.Payload())
	}
	return nil
}

func mxReadNext(ctx context.Context, r pulsar.Reader) ([]byte, error) {
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	m, err := r.Next(rctx)
	if err != nil {
		return nil, err
	}
	return m.Payload(), nil
}

func mxReader(ctx context.Context, c pulsar.Client, e matrixEnv) error {
	topic := e.Prefix + "-reader"
	ids, err := mxProduceN(ctx, c, topic, 10)
	if err != nil {
		return err
	}
	r, err := c.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
	if err != nil {
		return err
	}
	defer r.Close()
	for i := range 10 {
		if b, err := mxReadNext(ctx, r); err != nil || !bytes.Equal(b, mPayload(i)) {
			return fmt.Errorf("reader from earliest: message %d: %q %v", i, b, err)
		}
	}
	r2, err := c.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: ids[4]})
	if err != nil {
		return err
	}
	defer r2.Close()
	if b, err := mxReadNext(ctx, r2); err != nil || !bytes.Equal(b, mPayload(5)) {
		return fmt.Errorf("reader after message 4 started at %q (%v), want m-5", b, err)
	}
	return nil
}

func mxSeekID(ctx context.Context, c pulsar.Client, e matrixEnv) error {
	topic := e.Prefix + "-seekid"
	cons, err := mxSubscribe(c, topic, "", pulsar.Exclusive)
	if err != nil {
		return err
	}
	defer cons.Close()
	ids, err := mxProduceN(ctx, c, topic, 10)
	if err != nil {
		return err
	}
	if err := mxExpectInOrder(ctx, cons, 0, 10); err != nil {
		return err
	}
	// Delivery resumes after the given message, as every client does it directly too.
	if err := cons.Seek(ids[3]); err != nil {
		return err
	}
	return mxExpectInOrder(ctx, cons, 4, 10)
}

func mxSeekTime(ctx context.Context, c pulsar.Client, e matrixEnv) error {
	topic := e.Prefix + "-seektime"
	cons, err := mxSubscribe(c, topic, "", pulsar.Exclusive)
	if err != nil {
		return err
	}
	defer cons.Close()
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		return err
	}
	defer p.Close()
	var at time.Time
	for i := range 10 {
		if i == 5 { // publish times on either side of the seek time
			time.Sleep(50 * time.Millisecond)
			at = time.Now()
			time.Sleep(50 * time.Millisecond)
		}
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: mPayload(i)}); err != nil {
			return err
		}
	}
	if err := mxExpectInOrder(ctx, cons, 0, 10); err != nil {
		return err
	}
	if err := cons.SeekByTime(at); err != nil {
		return err
	}
	return mxExpectInOrder(ctx, cons, 5, 10)
}

func mxNack(ctx context.Context, c pulsar.Client, e matrixEnv) error {
	topic := e.Prefix + "-nack"
	cons, err := mxSubscribe(c, topic, "", pulsar.Shared, func(o *pulsar.ConsumerOptions) { o.NackRedeliveryDelay = 500 * time.Millisecond })
	if err != nil {
		return err
	}
	defer cons.Close()
	if _, err := mxProduceN(ctx, c, topic, 1); err != nil {
		return err
	}
	m, err := mxReceive(ctx, cons, "first delivery")
	if err != nil {
		return err
	}
	cons.Nack(m)
	again, err := mxReceive(ctx, cons, "redelivery after the negative ack")
	if err != nil {
		return err
	}
	if !bytes.Equal(again.Payload(), mPayload(0)) || again.RedeliveryCount() != 1 {
		return fmt.Errorf("redelivered %q with count %d", again.Payload(), again.RedeliveryCount())
	}
	cons.Ack(again)
	return nil
}

func mxDeadLetter(ctx context.Context, c pulsar.Client, e matrixEnv) error {
	topic := e.Prefix + "-dlq"
	dlq, err := mxSubscribe(c, topic+"-dead", "", pulsar.Exclusive)
	if err != nil {
		return err
	}
	defer dlq.Close()
	cons, err := mxSubscribe(c, topic, "", pulsar.Shared, func(o *pulsar.ConsumerOptions) {
		o.NackRedeliveryDelay = 300 * time.Millisecond
		o.DLQ = &pulsar.DLQPolicy{MaxDeliveries: 1, DeadLetterTopic: topic + "-dead"}
	})
	if err != nil {
		return err
	}
	defer cons.Close()
	if _, err := mxProduceN(ctx, c, topic, 1); err != nil {
		return err
	}
	// Negative acks until the message is moved: how many deliveries that takes is the client's
	// reading of MaxDeliveries (pulsar-client-go: deliveries; Java: redeliveries).
	deliveries := 0
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		if m, err := mxReceiveWithin(ctx, cons, 200*time.Millisecond); err == nil {
			deliveries++
			cons.Nack(m)
		}
		dead, err := mxReceiveWithin(ctx, dlq, 200*time.Millisecond)
		if err != nil {
			continue
		}
		if !bytes.Equal(dead.Payload(), mPayload(0)) || deliveries == 0 {
			return fmt.Errorf("dead letter %q after %d deliveries", dead.Payload(), deliveries)
		}
		return nil
	}
	return fmt.Errorf("nothing on the dead-letter topic within 30 s (%d deliveries)", deliveries)
}

func mxReceiveWithin(ctx context.Context, c pulsar.Consumer, d time.Duration) (pulsar.Message, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return c.Receive(ctx)
}

func mxRetryTopic(ctx context.Context, c pulsar.Client, e matrixEnv) error {
	topic := e.Prefix + "-retry"
	cons, err := mxSubscribe(c, topic, "", pulsar.Shared, func(o *pulsar.ConsumerOptions) {
		o.RetryEnable = true
		o.DLQ = &pulsar.DLQPolicy{MaxDeliveries: 3, RetryLetterTopic: topic + "-retry", DeadLetterTopic: topic + "-dead"}
	})
	if err != nil {
		return err
	}
	defer cons.Close()
	if _, err := mxProduceN(ctx, c, topic, 1); err != nil {
		return err
	}
	m, err := mxReceive(ctx, cons, "first delivery")
	if err != nil {
		return err
	}
	cons.ReconsumeLater(m, 500*time.Millisecond)
	again, err := mxReceive(ctx, cons, "the retried message")
	if err != nil {
		return err
	}
	if !bytes.Equal(again.Payload(), mPayload(0)) || again.Properties()["RECONSUMETIMES"] != "1" || !strings.HasSuffix(again.Topic(), "-retry") {
		return fmt.Errorf("retried %q from %s with RECONSUMETIMES %q", again.Payload(), again.Topic(), again.Properties()["RECONSUMETIMES"])
	}
	cons.Ack(again)
	return nil
}

// mxDelayed: a message delayed by 3 s is sent before an undelayed one and must arrive after it.
func mxDelayed(ctx context.Context, c pulsar.Client, e matrixEnv) error {
	topic := e.Prefix + "-delayed"
	cons, err := mxSubscribe(c, topic, "", pulsar.Shared)
	if err != nil {
		return err
	}
	defer cons.Close()
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		return err
	}
	defer p.Close()
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: mPayload(0), DeliverAfter: 3 * time.Second}); err != nil {
		return err
	}
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: mPayload(1)}); err != nil {
		return err
	}
	var order []string
	for i := range 2 {
		m, err := mxReceive(ctx, cons, fmt.Sprint("message ", i))
		if err != nil {
			return err
		}
		order = append(order, string(m.Payload()))
		cons.Ack(m)
	}
	if order[0] != "m-1" || order[1] != "m-0" {
		return fmt.Errorf("order %v; want the delayed m-0 last", order)
	}
	return nil
}

func mxExclusiveProducer(ctx context.Context, c pulsar.Client, e matrixEnv) error {
	topic := e.Prefix + "-exclprod"
	opts := pulsar.ProducerOptions{Topic: topic, ProducerAccessMode: pulsar.ProducerAccessModeExclusive}
	a, err := c.CreateProducer(opts)
	if err != nil {
		return err
	}
	if b, err := c.CreateProducer(opts); err == nil {
		b.Close()
		a.Close()
		return errors.New("a second Exclusive producer was created")
	}
	a.Close()
	b, err := c.CreateProducer(opts)
	if err != nil {
		return fmt.Errorf("an Exclusive producer after the first closed: %w", err)
	}
	defer b.Close()
	_, err = b.Send(ctx, &pulsar.ProducerMessage{Payload: mPayload(0)})
	return err
}

func mxTransactions(ctx context.Context, _ pulsar.Client, e matrixEnv) error {
	topic := e.Prefix + "-txn"
	c, err := mxClientOf(pulsar.ClientOptions{URL: e.URL, EnableTransaction: true})
	if err != nil {
		return err
	}
	defer c.Close()
	cons, err := mxSubscribe(c, topic, "", pulsar.Exclusive)
	if err != nil {
		return err
	}
	defer cons.Close()
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, SendTimeout: -1})
	if err != nil {
		return err
	}
	defer p.Close()
	aborted, err := c.NewTransaction(time.Minute)
	if err != nil {
		return fmt.Errorf("new transaction: %w", err)
	}
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: mPayload(0), Transaction: aborted}); err != nil {
		return err
	}
	if err := aborted.Abort(ctx); err != nil {
		return fmt.Errorf("abort: %w", err)
	}
	txn, err := c.NewTransaction(time.Minute)
	if err != nil {
		return fmt.Errorf("new transaction: %w", err)
	}
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: mPayload(1), Transaction: txn}); err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	m, err := cons.Receive(rctx)
	cancel()
	if err == nil {
		return fmt.Errorf("%q of an open or aborted transaction was delivered", m.Payload())
	}
	if err := txn.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	m, err = mxReceive(ctx, cons, "the committed message")
	if err != nil {
		return err
	}
	if !bytes.Equal(m.Payload(), mPayload(1)) {
		return fmt.Errorf("got %q, want the committed m-1 (m-0 was aborted)", m.Payload())
	}
	return nil
}

func mxChunking(ctx context.Context, c pulsar.Client, e matrixEnv) error {
	topic := e.Prefix + "-chunks"
	big := make([]byte, 1<<20)
	for i := range big {
		big[i] = byte(i*31 + 7)
	}
	cons, err := mxSubscribe(c, topic, "", pulsar.Exclusive)
	if err != nil {
		return err
	}
	defer cons.Close()
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, EnableChunking: true, ChunkMaxMessageSize: 64 << 10})
	if err != nil {
		return err
	}
	defer p.Close()
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: big}); err != nil {
		return err
	}
	m, err := mxReceive(ctx, cons, "the chunked message")
	if err != nil {
		return err
	}
	if !bytes.Equal(m.Payload(), big) {
		return fmt.Errorf("the 1 MiB message arrived altered (%d bytes)", len(m.Payload()))
	}
	return nil
}

// mxTokenRefresh: tokens that expire every few seconds, renewed by the harness in TokenFile;
// the client reads the file whenever the proxy challenges it.
func mxTokenRefresh(ctx context.Context, _ pulsar.Client, e matrixEnv) error {
	if _, err := os.Stat(e.TokenFile); err != nil {
		return err
	}
	c, err := mxClientOf(pulsar.ClientOptions{URL: e.AuthURL, Authentication: pulsar.NewAuthenticationTokenFromFile(e.TokenFile)})
	if err != nil {
		return err
	}
	defer c.Close()
	topic := e.Prefix + "-refresh"
	cons, err := mxSubscribe(c, topic, "", pulsar.Exclusive)
	if err != nil {
		return err
	}
	defer cons.Close()
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		return err
	}
	defer p.Close()
	for i, end := 0, time.Now().Add(15*time.Second); time.Now().Before(end); i++ {
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: mPayload(i)}); err != nil {
			return fmt.Errorf("send %d: %w", i, err)
		}
		if err := mxExpectInOrder(ctx, cons, i, i+1); err != nil {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
	return nil
}

func mxTLS(ctx context.Context, _ pulsar.Client, e matrixEnv) error {
	c, err := mxClientOf(pulsar.ClientOptions{URL: e.TLSURL, TLSTrustCertsFilePath: e.CAFile, TLSValidateHostname: true})
	if err != nil {
		return err
	}
	defer c.Close()
	return mxRoundtrip(ctx, c, e.Prefix+"-tls", 10)
}

func mxMTLS(ctx context.Context, _ pulsar.Client, e matrixEnv) error {
	c, err := mxClientOf(pulsar.ClientOptions{URL: e.MTLSURL, TLSTrustCertsFilePath: e.CAFile, TLSValidateHostname: true,
		Authentication: pulsar.NewAuthenticationTLS(e.CertFile, e.KeyFile)})
	if err != nil {
		return err
	}
	defer c.Close()
	return mxRoundtrip(ctx, c, e.Prefix+"-mtls", 10)
}
