package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/test/wait"
	"github.com/pulsar-proxy/pulsar-proxy/test/wsclient"
)

// The differential's scripts (websocket_diff_test.go).

// wsProduceConsumeAck: three messages produced, consumed, acknowledged; a consumer back on
// the subscription gets nothing again.
func wsProduceConsumeAck(t *testing.T, ctx context.Context, base, topic string, tr *transcript) {
	c := wsDial(t, ctx, base, wsclient.Path("consumer", topic, "s", nil))
	wsProduce(t, ctx, base, topic, tr, wsPayload("one"), wsPayload("two"), wsPayload("three"))
	for i := 0; i < 3; i++ {
		m := wsNext(t, ctx, c)
		tr.msg("got", m)
		wsSend(t, ctx, c, map[string]any{"messageId": m["messageId"]})
	}
	wsSend(t, ctx, c, map[string]any{"type": "isEndOfTopic"})
	tr.msg("end", wsNext(t, ctx, c))
	c.Close()
	again := wsRedial(t, ctx, base, wsclient.Path("consumer", topic, "s", nil))
	wsQuiet(t, again, 1500*time.Millisecond, tr, "again")
}

// wsRedial opens a consumer on the exclusive subscription a session just closed: both
// services close the broker's consumer after the WebSocket close, so the subscription may
// still be busy (409) for a moment.
func wsRedial(t *testing.T, ctx context.Context, base, path string) *wsclient.Conn {
	t.Helper()
	var c *wsclient.Conn
	wait.Until(t, 30*time.Second, "the closed consumer to leave its subscription", func() bool {
		var err error
		c, err = wsclient.Dial(ctx, base, path, nil)
		if wsclient.StatusOf(err) == http.StatusConflict {
			time.Sleep(200 * time.Millisecond)
			return false
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return true
	})
	return c
}

// wsKeysAndProperties: what a message carries arrives as it was sent.
func wsKeysAndProperties(t *testing.T, ctx context.Context, base, topic string, tr *transcript) {
	c := wsDial(t, ctx, base, wsclient.Path("consumer", topic, "s", wsQ("subscriptionType", "Shared")))
	wsProduce(t, ctx, base, topic, tr,
		map[string]any{"payload": wsclient.Payload([]byte("k")), "key": "key-1", "properties": map[string]string{"a": "1", "b": "two"}},
		map[string]any{"payload": wsclient.Payload([]byte("e")), "eventTime": "2024-05-01T12:00:00.250Z", "context": "ctx"},
		map[string]any{"payload": "", "properties": map[string]any{"n": 7, "t": true}, "key": 42},
		map[string]any{"payload": wsclient.Payload([]byte("r")), "replicationClusters": []string{"standalone"}, "deliverAfterMs": 1},
	)
	for i := 0; i < 4; i++ {
		m := wsNext(t, ctx, c)
		tr.msg("got", m)
		wsSend(t, ctx, c, map[string]any{"messageId": m["messageId"]})
	}
}

// wsPullMode: nothing arrives before the client permits it, then as many as permitted.
func wsPullMode(t *testing.T, ctx context.Context, base, topic string, tr *transcript) {
	c := wsDial(t, ctx, base, wsclient.Path("consumer", topic, "s", wsQ("pullMode", "true")))
	wsProduce(t, ctx, base, topic, tr, wsPayload("1"), wsPayload("2"), wsPayload("3"), wsPayload("4"))
	wsQuiet(t, c, 700*time.Millisecond, tr, "before permits")
	wsSend(t, ctx, c, map[string]any{"type": "permit", "permitMessages": 2})
	tr.msg("got", wsNext(t, ctx, c))
	tr.msg("got", wsNext(t, ctx, c))
	wsQuiet(t, c, 700*time.Millisecond, tr, "after 2 permits")
	wsSend(t, ctx, c, map[string]any{"type": "permit", "permitMessages": 5})
	tr.msg("got", wsNext(t, ctx, c))
	tr.msg("got", wsNext(t, ctx, c))
	wsQuiet(t, c, 500*time.Millisecond, tr, "after all")
}

// wsNackRedelivery: a negatively acknowledged message comes again, counted.
func wsNackRedelivery(t *testing.T, ctx context.Context, base, topic string, tr *transcript) {
	c := wsDial(t, ctx, base, wsclient.Path("consumer", topic, "s", wsQ("subscriptionType", "Shared", "negativeAckRedeliveryDelay", "200")))
	wsProduce(t, ctx, base, topic, tr, wsPayload("again"))
	m := wsNext(t, ctx, c)
	tr.msg("got", m)
	wsSend(t, ctx, c, map[string]any{"type": "negativeAcknowledge", "messageId": m["messageId"]})
	m = wsNext(t, ctx, c)
	tr.msg("redelivered", m)
	wsSend(t, ctx, c, map[string]any{"messageId": m["messageId"]})
	wsQuiet(t, c, time.Second, tr, "after ack")
}

// wsDeadLetter: a message redelivered maxRedeliverCount times goes to the dead-letter
// topic with where it came from, and no longer to the consumer.
func wsDeadLetter(t *testing.T, ctx context.Context, base, topic string, tr *transcript) {
	dlq := wsDial(t, ctx, base, wsclient.Path("consumer", topic+"-s-DLQ", "dlq", wsQ("subscriptionInitialPosition", "Earliest")))
	c := wsDial(t, ctx, base, wsclient.Path("consumer", topic, "s",
		wsQ("subscriptionType", "Shared", "maxRedeliverCount", "1", "negativeAckRedeliveryDelay", "200")))
	wsProduce(t, ctx, base, topic, tr, map[string]any{"payload": wsclient.Payload([]byte("doomed")), "key": "k", "properties": map[string]string{"p": "v"}})
	for i := 0; i < 2; i++ {
		m := wsNext(t, ctx, c)
		tr.msg("got", m)
		wsSend(t, ctx, c, map[string]any{"type": "negativeAcknowledge", "messageId": m["messageId"]})
	}
	tr.msg("dead-lettered", wsNext(t, ctx, dlq))
	wsQuiet(t, c, 1500*time.Millisecond, tr, "consumer after")
}

// wsReaders: from the earliest message, from the latest, and after a message id.
func wsReaders(t *testing.T, ctx context.Context, base, topic string, tr *transcript) {
	p := wsDial(t, ctx, base, wsclient.Path("producer", topic, "", nil))
	var first string
	for i := 0; i < 3; i++ {
		wsSend(t, ctx, p, wsPayload(fmt.Sprint("m", i)))
		a := wsNext(t, ctx, p)
		tr.msg("ack", a)
		if i == 0 {
			first = a["messageId"].(string)
		}
	}
	earliest := wsDial(t, ctx, base, wsclient.Path("reader", topic, "", wsQ("messageId", "earliest")))
	for i := 0; i < 3; i++ {
		tr.msg("earliest", wsNext(t, ctx, earliest))
	}
	latest := wsDial(t, ctx, base, wsclient.Path("reader", topic, "", wsQ("messageId", "latest")))
	after := wsDial(t, ctx, base, wsclient.Path("reader", topic, "", wsQ("messageId", first)))
	wsSend(t, ctx, p, wsPayload("m3"))
	tr.msg("ack", wsNext(t, ctx, p))
	tr.msg("latest", wsNext(t, ctx, latest))
	for i := 0; i < 3; i++ {
		tr.msg("after first", wsNext(t, ctx, after))
	}
	wsQuiet(t, after, 500*time.Millisecond, tr, "after first, then")
	wsSend(t, ctx, earliest, map[string]any{"type": "isEndOfTopic"})
	tr.msg("end", wsNext(t, ctx, earliest))
}

// wsPartitioned: keyed messages over a partitioned topic's partitions (the same key to the
// same partition on both sides), every one consumed.
func wsPartitioned(t *testing.T, ctx context.Context, base, topic string, tr *transcript) {
	if err := theRig.CreatePartitionedTopic(ctx, topic, 3); err != nil {
		t.Fatal(err)
	}
	c := wsDial(t, ctx, base, wsclient.Path("consumer", topic, "s", nil))
	var msgs []map[string]any
	for i := 0; i < 6; i++ {
		msgs = append(msgs, map[string]any{"payload": wsclient.Payload([]byte(fmt.Sprint("p", i))), "key": fmt.Sprint("key-", i)})
	}
	wsProduce(t, ctx, base, topic, tr, msgs...)
	got := newTranscript(topic)
	got.ids = tr.ids
	for i := 0; i < 6; i++ {
		m := wsNext(t, ctx, c)
		got.msg("got", m)
		wsSend(t, ctx, c, map[string]any{"messageId": m["messageId"]})
	}
	tr.lines = append(tr.lines, wsSorted(got.lines)...) // partitions interleave as they will
}

// wsProducerErrors: what a producer is answered for messages it cannot send.
func wsProducerErrors(t *testing.T, ctx context.Context, base, topic string, tr *transcript) {
	p := wsDial(t, ctx, base, wsclient.Path("producer", topic, "", nil))
	for _, raw := range []string{
		`not json`,
		`{"payload":"!!!","context":"bad base64"}`,
		`{"context":"no payload"}`,
		`{"payload":"aGk","context":"unpadded"}`,
		`{"payload":"aGk=","context":5,"eventTime":"yesterday"}`,
		`{"payload":"aGk=","PAYLOAD":"!!","context":"keys match exactly"} and after`,
		`{"payload":"aGk=","deliverAt":"0","unknown":{"x":1},"context":"unknown fields"}`,
		`[1,2]`,
	} {
		wsSendRaw(t, ctx, p, raw)
		tr.msg("ack", wsNext(t, ctx, p))
	}
}

// wsConsumerErrors: how a consumer's session ends on commands it cannot take. The service
// closes with its own error code (not a valid close code: the connection drops) where the
// proxy closes with 4000 + that code; both count as the same kind here.
func wsConsumerErrors(t *testing.T, ctx context.Context, base, topic string, tr *transcript) {
	for _, raw := range []string{
		`not json`,
		`{"messageId":"!!!"}`,
		`{"messageId":"aGVsbG8="}`,
		`{"type":"permit"}`,
		`{}`,
	} {
		c := wsDial(t, ctx, base, wsclient.Path("consumer", topic, "s", wsQ("subscriptionType", "Shared")))
		wsSendRaw(t, ctx, c, raw)
		m, err := c.NextWithin(5 * time.Second)
		switch {
		case err != nil:
			tr.add("%s: %s", raw, wsCloseKind(wsclient.CloseCode(err)))
		case m == nil:
			tr.add("%s: still open", raw)
		default:
			tr.msg(raw, m)
		}
		c.CloseNow()
	}
}

func wsCloseKind(code int) string {
	switch code {
	case -1, 4003: // the service's 3 (dropped), the proxy's 4003
		return "FailedToDeserializeFromJSON"
	case 1011:
		return "internal error (1011)"
	}
	return fmt.Sprint("close ", code)
}

// wsNamesAndModes: the parameters that name and place a session: a named producer with an
// initial sequence id (a second producer of that name is refused), a named non-durable
// consumer with a priority reading from the earliest message, and a second consumer on an
// exclusive subscription (refused).
func wsNamesAndModes(t *testing.T, ctx context.Context, base, topic string, tr *transcript) {
	p := wsDial(t, ctx, base, wsclient.Path("producer", topic, "", wsQ("producerName", "named", "initialSequenceId", "100")))
	m := wsPayload("named")
	m["context"] = "0"
	wsSend(t, ctx, p, m)
	tr.msg("ack", wsNext(t, ctx, p))
	_, err := wsclient.Dial(ctx, base, wsclient.Path("producer", topic, "", wsQ("producerName", "named")), nil)
	tr.add("a second producer of that name: %d", wsclient.StatusOf(err))
	p.Close()
	nd := wsDial(t, ctx, base, wsclient.Path("consumer", topic, "nd", wsQ("subscriptionMode", "NonDurable",
		"subscriptionInitialPosition", "Earliest", "consumerName", "c1", "priorityLevel", "2", "subscriptionType", "Failover")))
	tr.msg("non-durable", wsNext(t, ctx, nd))
	nd.Close()
	ex := wsDial(t, ctx, base, wsclient.Path("consumer", topic, "ex", nil))
	_, err = wsclient.Dial(ctx, base, wsclient.Path("consumer", topic, "ex", nil), nil)
	tr.add("a second consumer of an exclusive subscription: %d", wsclient.StatusOf(err))
	ex.Close()
}

// wsV1Paths: the v1 paths, with the cluster in the topic's name (a namespace of the rig's
// cluster made through the v1 admin API): a consumer, a producer and a reader from the
// earliest message.
func wsV1Paths(t *testing.T, ctx context.Context, base, topic string, tr *transcript) {
	const tenant, ns = "public", "ws-v1"
	if err := theRig.CreateNamespaceV1(ctx, tenant, ns); err != nil {
		t.Fatal(err)
	}
	name := "persistent/" + tenant + "/" + theRig.Cluster + "/" + ns + "/" + topic[strings.LastIndexByte(topic, '/')+1:]
	c := wsDial(t, ctx, base, "/ws/consumer/"+name+"/s")
	p := wsDial(t, ctx, base, "/ws/producer/"+name)
	for i, body := range []string{"v1-one", "v1-two"} {
		m := wsPayload(body)
		m["context"] = fmt.Sprint(i)
		wsSend(t, ctx, p, m)
		tr.msg("ack", wsNext(t, ctx, p))
	}
	for range 2 {
		m := wsNext(t, ctx, c)
		tr.msg("got", m)
		wsSend(t, ctx, c, map[string]any{"messageId": m["messageId"]})
	}
	r := wsDial(t, ctx, base, "/ws/reader/"+name+"?messageId=earliest")
	for range 2 {
		tr.msg("read", wsNext(t, ctx, r))
	}
	for _, c := range []*wsclient.Conn{c, p, r} {
		c.Close()
	}
}

// wsBadRequests: the HTTP status of refused upgrades. A path the service cannot read is a
// 500 there for producers and readers (an exception in its handler's constructor) and 400
// at the proxy, as for consumers at both: such rows compare as "bad path".
func wsBadRequests(t *testing.T, ctx context.Context, base, topic string, tr *transcript) {
	_, rest, _ := wsCut(topic, "://")
	for _, r := range []struct {
		path    string
		badPath bool
	}{
		{"/ws/v2/producer/foo/" + rest, true},
		{"/ws/v2/producer/persistent/public/default", true},
		{"/ws/v2/reader/persistent/bad%20tenant/default/t", true},
		{"/ws/v2/consumer/persistent/" + rest + "/extra/s", true},
		{"/ws/v2/nothing/persistent/" + rest, false},
		{"/ws/v2/consumer/persistent/" + rest + "/s?subscriptionType=Bogus", false},
		{"/ws/v2/consumer/persistent/" + rest + "/s?ackTimeoutMillis=10", false},
		{"/ws/v2/consumer/persistent/" + rest + "/s?receiverQueueSize=-1", false},
		{"/ws/v2/consumer/persistent/" + rest + "/s?maxRedeliverCount=0", false},
		{"/ws/v2/consumer/persistent/" + rest + "/s?deadLetterTopic=x", false},
		{"/ws/v2/producer/persistent/" + rest + "?sendTimeoutMillis=abc", false},
		{"/ws/v2/producer/persistent/" + rest + "?compressionType=FOO", false},
		{"/ws/v2/producer/persistent/" + rest + "?hashingScheme=Other", false},
		{"/ws/v2/producer/persistent/" + rest + "?messageRoutingMode=Other", false},
		{"/ws/v2/reader/persistent/" + rest + "?messageId=zzz", false},
		{"/ws/v2/reader/persistent/" + rest + "?receiverQueueSize=x", false},
		{"/ws/v2/producer/persistent/" + rest + "?producerName=%20", false},
	} {
		c, err := wsclient.Dial(ctx, base, r.path, nil)
		status := wsclient.StatusOf(err)
		if err == nil {
			c.CloseNow()
		}
		verdict := fmt.Sprint(status)
		if r.badPath && (status == 400 || status == 500) {
			verdict = "bad path"
		}
		tr.add("%s -> %s", strings.ReplaceAll(r.path, rest, "<topic>"), verdict)
	}
}

func wsCut(s, sep string) (string, string, bool) {
	for i := 0; i+len(sep) <= len(s); i++ {
		if s[i:i+len(sep)] == sep {
			return s[:i], s[i+len(sep):], true
		}
	}
	return s, "", false
}
