package wsapi

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

func TestParsePath(t *testing.T) {
	cases := []struct {
		path   string
		kind   Kind
		topic  string
		sub    string
		status int // 0: parsed
	}{
		{"/ws/v2/producer/persistent/public/default/t", Producer, "persistent://public/default/t", "", 0},
		{"/ws/v2/reader/non-persistent/public/default/t", Reader, "non-persistent://public/default/t", "", 0},
		{"/ws/v2/consumer/persistent/public/default/t/sub", Consumer, "persistent://public/default/t", "sub", 0},
		{"/ws/v2/consumer/persistent/public/default/t/my%20sub", Consumer, "persistent://public/default/t", "my sub", 0},
		{"/ws/v2/producer/persistent/public/default/a/b//c", Producer, "persistent://public/default/a/b/c", "", 0},
		{"/ws/v2/producer/persistent/public/default/a+b%2Fc", Producer, "persistent://public/default/a b/c", "", 0},
		{"/ws/producer/persistent/prop/cluster/ns/t", Producer, "persistent://prop/cluster/ns/t", "", 0},
		{"/ws/consumer/persistent/prop/cluster/ns/t/s", Consumer, "persistent://prop/cluster/ns/t", "s", 0},
		{"/ws/v2/producer/persistent/public/default", 0, "", "", http.StatusBadRequest},
		{"/ws/v2/producer/other/public/default/t", 0, "", "", http.StatusBadRequest},
		{"/ws/v2/producer/persistent/bad%20tenant/default/t", 0, "", "", http.StatusBadRequest},
		{"/ws/v2/consumer/persistent/public/default/a/b/s", 0, "", "", http.StatusBadRequest},
		{"/ws/v2/consumer/persistent/public/default/t/", 0, "", "", http.StatusBadRequest},
		{"/ws/v2/producer/persistent/public/default/%zz", 0, "", "", http.StatusBadRequest},
		{"/ws/v2/producer/persistent/public/default/%20", 0, "", "", http.StatusBadRequest},
		{"/ws/v2/other/persistent/public/default/t", 0, "", "", http.StatusNotFound},
		{"/ws/v3/consumer/persistent/public/default/t/s", 0, "", "", http.StatusNotFound},
	}
	for _, c := range cases {
		e, err := ParsePath(c.path)
		if c.status != 0 {
			r, ok := err.(*Refusal)
			if !ok || r.Status != c.status {
				t.Errorf("%s: %v, want status %d", c.path, err, c.status)
			}
			continue
		}
		if err != nil || e.Kind != c.kind || e.Topic != c.topic || e.Subscription != c.sub {
			t.Errorf("%s: %+v %v, want %v %q %q", c.path, e, err, c.kind, c.topic, c.sub)
		}
	}
}

func TestParseParams(t *testing.T) {
	q := func(s string) url.Values { v, _ := url.ParseQuery(s); return v }
	p, err := ParseProducer(q("producerName=p&initialSequenceId=7&sendTimeoutMillis=0&messageRoutingMode=RoundRobinPartition&hashingScheme=Murmur3_32Hash&batchingEnabled=TRUE&batchingMaxMessages=5&batchingMaxPublishDelay=3&compressionType=ZSTD"))
	if err != nil || p.Name != "p" || p.InitialSequenceID != 7 || p.SendTimeout != 0 || p.RoutingMode != RoundRobinPartition ||
		p.HashingScheme != Murmur3Hash || !p.Batching || p.BatchMaxMessages != 5 || p.BatchMaxDelay != 3*time.Millisecond || p.Compression != pb.CompressionType_ZSTD {
		t.Fatalf("producer: %+v %v", p, err)
	}
	c, err := ParseConsumer(q("subscriptionType=Key_Shared&subscriptionMode=NonDurable&subscriptionInitialPosition=Earliest&receiverQueueSize=5000&maxRedeliverCount=3&pullMode=true&priorityLevel=2&negativeAckRedeliveryDelay=10"), "persistent://a/b/t", "s")
	if err != nil || c.Type != pb.CommandSubscribe_Key_Shared || c.Durable || c.InitialPosition != pb.CommandSubscribe_Earliest ||
		c.ReceiverQueueSize != MaxReceiverQueueSize || c.MaxRedeliverCount != 3 || c.DeadLetterTopic != "persistent://a/b/t-s-DLQ" ||
		c.AckTimeout != 30*time.Second || !c.PullMode || c.PriorityLevel != 2 || c.NegativeAckDelay != 10*time.Millisecond {
		t.Fatalf("consumer: %+v %v", c, err)
	}
	r, err := ParseReader(q("messageId=earliest&receiverQueueSize=0"))
	if err != nil || !r.Start.Earliest || r.ReceiverQueueSize != 0 {
		t.Fatalf("reader: %+v %v", r, err)
	}
	id := MessageID{Ledger: 9, Entry: 4, Partition: -1, BatchIndex: 2, BatchSize: 3}
	r, err = ParseReader(q("messageId=" + url.QueryEscape(id.Encode())))
	if err != nil || r.Start.ID == nil || *r.Start.ID != id {
		t.Fatalf("reader from an id: %+v %v", r, err)
	}
	for _, bad := range []struct {
		parse  func() error
		status int
	}{
		{func() error { _, err := ParseProducer(q("sendTimeoutMillis=abc")); return err }, 400},
		{func() error { _, err := ParseProducer(q("sendTimeoutMillis=-1")); return err }, 400},
		{func() error { _, err := ParseProducer(q("initialSequenceId=99999999999999999999")); return err }, 400},
		{func() error { _, err := ParseProducer(q("compressionType=lz4")); return err }, 400},
		{func() error { _, err := ParseProducer(q("producerName=+")); return err }, 400},
		{func() error { _, err := ParseProducer(q("encryptionKeys=k1")); return err }, 500},
		{func() error { _, err := ParseConsumer(q("ackTimeoutMillis=999"), "t", "s"); return err }, 400},
		{func() error { _, err := ParseConsumer(q("deadLetterTopic=x"), "t", "s"); return err }, 400},
		{func() error { _, err := ParseConsumer(q("subscriptionType=shared"), "t", "s"); return err }, 400},
		{func() error { _, err := ParseConsumer(q("receiverQueueSize=-2"), "t", "s"); return err }, 400},
		{func() error { _, err := ParseConsumer(q("priorityLevel=2147483648"), "t", "s"); return err }, 400},
		{func() error { _, err := ParseReader(q("messageId=!!")); return err }, 500},
		{func() error { _, err := ParseReader(q("receiverQueueSize=x")); return err }, 500},
	} {
		err := bad.parse()
		if r, ok := err.(*Refusal); !ok || r.Status != bad.status {
			t.Errorf("%v, want a refusal with %d", err, bad.status)
		}
	}
}

func TestProducerMessage(t *testing.T) {
	m, err := DecodeProducerMessage([]byte(`{"payload":"aGk=","PAYLOAD":"x","properties":{"a":"1","n":2,"b":false},"context":7,"key":"k","deliverAt":"12","deliverAfterMs":3.0,"eventTime":"2024-05-01T12:00:00Z"} trailing`))
	if err != nil {
		t.Fatal(err)
	}
	props, err := m.PropertyMap()
	ctx, has := m.ContextString()
	if p, _ := m.DecodePayload(); string(p) != "hi" || err != nil || props["n"] != "2" || props["b"] != "false" || ctx != "7" || !has ||
		m.Key.String() != "k" || m.DeliverAt != 12 || m.DeliverAfterMs != 3 {
		t.Fatalf("%+v %v", m, props)
	}
	if m, _ := DecodeProducerMessage([]byte(`{"properties":{"z":null}}`)); m.HasPayload() {
		t.Fatal("a missing payload read as present")
	} else if _, err := m.PropertyMap(); err == nil {
		t.Fatal("a null property value accepted")
	}
	for _, esc := range []string{`{"payload":"a\u0047k="}`, `{"payload":"aGk="}`, `{"payload":"aGk"}`, ` {"x":[{"payload":"!"}],"payload":"aGk=" , "y":1}`} {
		m, err := DecodeProducerMessage([]byte(esc))
		if p, perr := m.DecodePayload(); err != nil || perr != nil || string(p) != "hi" {
			t.Errorf("%s: %q %v %v", esc, p, err, perr)
		}
	}
	for _, bad := range []string{`not json`, `[1]`, `{"properties":[1]}`, `{"context":{}}`, `{"deliverAt":"x"}`, `{"payload":"aGk="`, `{"a":1,}`, `{"a" 1}`} {
		if _, err := DecodeProducerMessage([]byte(bad)); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
	c, err := DecodeConsumerCommand([]byte(`{"type":"permit","permitMessages":3,"TYPE":"x"}`))
	if err != nil || c.Type != "permit" || *c.PermitMessages != 3 {
		t.Fatalf("%+v %v", c, err)
	}
}

// TestJSONOut: what the proxy writes is JSON that reads back as written, escaped as Jackson
// escapes it.
func TestJSONOut(t *testing.T) {
	m := ConsumerMessage{ID: "CAUQADAA", Payload: []byte("hi"), Properties: map[string]string{"b": "x\"\n\x01<>&\u2028", "a": "\xff"},
		PublishTime: "t", RedeliveryCount: 2, Key: "k", HasKey: true}
	b := m.AppendJSON(nil)
	want := `{"messageId":"CAUQADAA","payload":"aGk=","properties":{"a":"` + "\ufffd" + `","b":"x\"\n\u0001<>&` + "\u2028" + `"},"publishTime":"t","redeliveryCount":2,"key":"k"}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	var back map[string]any
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	a := AckOK("id", "", true).AppendJSON(nil)
	if string(a) != `{"result":"ok","messageId":"id","context":"","errorCode":0,"schemaVersion":0}` {
		t.Fatalf("ack: %s", a)
	}
	e := AckError(PayloadEncodingError, "bad", "", false).AppendJSON(nil)
	if string(e) != `{"result":"send-error:7","errorMsg":"bad","errorCode":0,"schemaVersion":0}` {
		t.Fatalf("error ack: %s", e)
	}
}

// TestMessageID: ids are written as a Java client writes them (the broker's service wrote
// CAUQADAA for ledger 5, entry 0), and read back.
func TestMessageID(t *testing.T) {
	if got := (MessageID{Ledger: 5, Entry: 0, Partition: -1, BatchIndex: -1}).Encode(); got != "CAUQADAA" {
		t.Fatalf("encoded as %s, want CAUQADAA", got)
	}
	// A chunked message's id, as Pulsar 4.0.8's ChunkMessageIdImpl.toByteArray writes it
	// (these two strings are what the 4.0.8 client jar printed for the same ids).
	chunked := map[string]MessageID{
		"CAUQAzAAOgYIBRABMAA=":     {Ledger: 5, Entry: 3, Partition: -1, BatchIndex: -1, Chunked: true, FirstLedger: 5, FirstEntry: 1},
		"CAcQDBgCMAA6CAgHEAoYAjAA": {Ledger: 7, Entry: 12, Partition: 2, BatchIndex: -1, Chunked: true, FirstLedger: 7, FirstEntry: 10},
	}
	for want, id := range chunked {
		if got := id.Encode(); got != want {
			t.Errorf("chunked %+v encoded as %s, want %s", id, got, want)
		}
	}
	ids := []MessageID{{Ledger: 1, Entry: 2, Partition: -1, BatchIndex: -1}, {Ledger: 1, Entry: 2, Partition: 3, BatchIndex: -1},
		{Ledger: 7, Entry: 8, Partition: 0, BatchIndex: 4, BatchSize: 10}, chunked["CAcQDBgCMAA6CAgHEAoYAjAA"]}
	for _, id := range ids {
		back, err := DecodeMessageID(id.Encode())
		if err != nil || back != id {
			t.Errorf("%+v came back as %+v %v", id, back, err)
		}
	}
	if _, err := DecodeMessageID("aGVsbG8="); err != ErrNotMessageID {
		t.Errorf("not a MessageIdData: %v", err)
	}
	if _, err := DecodeMessageID("!!"); err != ErrBase64 {
		t.Errorf("not base64: %v", err)
	}
	if s := (MessageID{Ledger: 3, Entry: 4, Partition: -1, BatchIndex: 2}).String(); s != "3:4:-1:2" {
		t.Errorf("String: %s", s)
	}
	if s := chunked["CAcQDBgCMAA6CAgHEAoYAjAA"].String(); s != "7:10:2;7:12:2" {
		t.Errorf("String of a chunked id: %s", s)
	}
}

func TestTimes(t *testing.T) {
	if s := FormatTime(1714564800250, time.UTC); s != "2024-05-01T12:00:00.25Z" {
		t.Errorf("FormatTime: %s", s)
	}
	if s := FormatTime(1714564800000, time.FixedZone("", 3600)); s != "2024-05-01T13:00:00+01:00" {
		t.Errorf("FormatTime in +01:00: %s", s)
	}
	for s, want := range map[string]int64{"2024-05-01T12:00:00.25Z": 1714564800250, "2024-05-01T13:00+01:00": 1714564800000} {
		if ms, err := ParseTime(s); err != nil || ms != want {
			t.Errorf("ParseTime(%s) = %d %v, want %d", s, ms, err, want)
		}
	}
	if _, err := ParseTime("2024-05-01T12:00:00"); err == nil {
		t.Error("a time without an offset accepted")
	}
}
