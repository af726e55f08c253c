package wsapi

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
)

// FuzzParse feeds a path, a query and a message to every parser of the API: none may panic,
// a parsed path names a topic of its endpoint's form, ids read back as written, and what the
// proxy writes back is valid JSON whatever the strings in it.
func FuzzParse(f *testing.F) {
	f.Add("/ws/v2/producer/persistent/public/default/t", "sendTimeoutMillis=1&batchingEnabled=true", `{"payload":"aGk=","properties":{"a":"1"}}`)
	f.Add("/ws/v2/consumer/persistent/public/default/t/s", "subscriptionType=Shared&maxRedeliverCount=2", `{"type":"permit","permitMessages":2}`)
	f.Add("/ws/v2/reader/persistent/public/default/t", "messageId=CAUQADAA", `{"messageId":"CAUQADAA"}`)
	f.Add("/ws/consumer/persistent/p/c/n/t/s", "encryptionKeys=e30=", `{"payload":null,"eventTime":"2024-01-01T00:00Z"}`)
	f.Add("/ws/v2/producer/persistent/a/b/x%2Fy+z//w", "receiverQueueSize=-1&ackTimeoutMillis=1", `[{"payload":"!"}]`)
	f.Fuzz(func(t *testing.T, path, query, body string) {
		q, _ := url.ParseQuery(query)
		if e, err := ParsePath(path); err == nil {
			if !strings.HasPrefix(e.Topic, "persistent://") && !strings.HasPrefix(e.Topic, "non-persistent://") {
				t.Fatalf("%q: topic %q", path, e.Topic)
			}
			if (e.Kind == Consumer) != (e.Subscription != "") {
				t.Fatalf("%q: kind %v with subscription %q", path, e.Kind, e.Subscription)
			}
			ParseConsumer(q, e.Topic, e.Subscription)
		}
		ParseProducer(q)
		ParseReader(q)
		if m, err := DecodeProducerMessage([]byte(body)); err == nil {
			if !json.Valid([]byte(body)) && !strings.HasPrefix(strings.TrimSpace(body), "{") && !strings.HasPrefix(strings.TrimSpace(body), "null") {
				t.Fatalf("%q read as a message", body)
			}
			m.DecodePayload()
			props, _ := m.PropertyMap()
			ctx, has := m.ContextString()
			out := AckError(PayloadEncodingError, body, ctx, has).AppendJSON(nil)
			cm := ConsumerMessage{ID: body, Payload: []byte(body), Properties: props, PublishTime: ctx, Key: body, HasKey: true}
			for _, b := range [][]byte{out, cm.AppendJSON(nil)} {
				if !json.Valid(b) {
					t.Fatalf("invalid JSON written: %s", b)
				}
			}
		}
		checkMembers(t, body)
		if c, err := DecodeConsumerCommand([]byte(body)); err == nil && c.MessageID != nil {
			if id, err := DecodeMessageID(*c.MessageID); err == nil {
				if back, err := DecodeMessageID(id.Encode()); err != nil || back.Ledger != id.Ledger || back.Entry != id.Entry ||
					back.BatchIndex != id.BatchIndex || back.Partition != id.Partition {
					t.Fatalf("%+v read back as %+v (%v)", id, back, err)
				}
			}
		}
	})
}

// checkMembers: for a valid JSON object, the scanner finds the members encoding/json finds,
// with the same values (a later duplicate key winning).
func checkMembers(t *testing.T, body string) {
	var want map[string]json.RawMessage
	if !strings.HasPrefix(strings.TrimLeft(body, " \t\r\n"), "{") || json.Unmarshal([]byte(body), &want) != nil {
		return
	}
	ms, err := members([]byte(body))
	if err != nil {
		t.Fatalf("%q: %v", body, err)
	}
	got := map[string]string{}
	for _, m := range ms {
		got[m.key] = string(m.value)
	}
	if len(got) != len(want) {
		t.Fatalf("%q: members %v, encoding/json %v", body, got, want)
	}
	for k, v := range want {
		if got[k] != string(v) {
			t.Fatalf("%q: %q is %q, encoding/json says %q", body, k, got[k], v)
		}
	}
}
