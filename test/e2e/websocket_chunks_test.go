package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/test/wait"
	"github.com/pulsar-proxy/pulsar-proxy/test/wsclient"
)

// wsChunkCount, wsChunkSize: messages the Java client splits in three chunks at the rig
// brokers' 5 MiB maxMessageSize, within a WebSocket session's default 16 MiB buffer.
const wsChunkCount, wsChunkSize = 3, 11 << 20

// produceChunked has the Java client produce wsChunkCount chunked messages (bigPayload(i),
// key i) to topic at url.
func produceChunked(t *testing.T, url, topic string) {
	t.Helper()
	out := runJavaProbe(t, "ChunkProducer", url, topic, strconv.Itoa(wsChunkCount), strconv.Itoa(wsChunkSize))
	if !hasLine(out, fmt.Sprint("sent ", wsChunkCount)) {
		t.Fatalf("ChunkProducer:\n%s", tailOf([]byte(out), 3000))
	}
}

// chunkedID reads a delivered message's id: the entries of its first and last chunk, or
// fails when it is no chunked message's id.
func chunkedID(t *testing.T, m map[string]any) (first, last uint64) {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(m["messageId"].(string))
	var d pb.MessageIdData
	if err != nil || proto.Unmarshal(b, &d) != nil || d.FirstChunkMessageId == nil {
		t.Fatalf("message id %v is no chunked message's (%v)", m["messageId"], err)
	}
	return d.FirstChunkMessageId.GetEntryId(), d.GetEntryId()
}

// wholeChunked checks a delivered message is message key of the scheme, whole.
func wholeChunked(t *testing.T, m map[string]any) int {
	t.Helper()
	i, err := strconv.Atoi(fmt.Sprint(m["key"]))
	if err != nil || !bytes.Equal(wsclient.Decoded(m), bigPayload(i, wsChunkSize)) {
		t.Fatalf("message with key %v arrived altered (%d bytes)", m["key"], len(wsclient.Decoded(m)))
	}
	return i
}

// TestWebSocketChunkedMessages: messages the Java client produced in chunks (through the
// proxy) reach a WebSocket consumer whole, with a chunked message's id; a negative ack has
// one come again whole; acking them acknowledges every chunk (the subscription's backlog,
// counted in entries, drops to nothing).
func TestWebSocketChunkedMessages(t *testing.T) {
	p, base := wsProxy(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	topic := uniqueTopic(t, "ws-chunks")
	q := wsQ("subscriptionType", "Shared", "negativeAckRedeliveryDelay", "100")
	c := wsDial(t, ctx, base, wsclient.Path("consumer", topic, "s", q))
	produceChunked(t, p.PulsarURL, topic)
	seen := map[int]bool{}
	var nacked string
	for len(seen) < wsChunkCount || nacked != "" {
		m := wsNext(t, ctx, c)
		i := wholeChunked(t, m)
		first, last := chunkedID(t, m)
		if last-first != 2 {
			t.Fatalf("message %d: chunks from entry %d to %d, want 3", i, first, last)
		}
		id := m["messageId"].(string)
		switch {
		case len(seen) == 0 && nacked == "":
			nacked = id
			wsSend(t, ctx, c, map[string]any{"type": "negativeAcknowledge", "messageId": id})
			continue
		case id == nacked:
			if m["redeliveryCount"] != float64(1) {
				t.Fatalf("message %d came again with redeliveryCount %v", i, m["redeliveryCount"])
			}
			nacked = ""
		}
		seen[i] = true
		wsSend(t, ctx, c, map[string]any{"messageId": id})
	}
	wait.Until(t, time.Minute, "every chunk acknowledged", func() bool {
		st, err := theRig.TopicStats(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		return st.Subscriptions["s"].MsgBacklog == 0
	})
	c.Close()
	again := wsRedial(t, ctx, base, wsclient.Path("consumer", topic, "s", q))
	if m, err := again.NextWithin(2 * time.Second); m != nil || err != nil {
		t.Fatalf("after the acks: %v %v, want nothing", m, err)
	}
	again.Close()
}

// wsChunked (a differential script): messages the Java client produced in chunks, straight to
// a broker, consumed whole over WebSocket with a chunked message's id and acknowledged (a
// consumer back on the subscription gets nothing again); read whole by a reader from the
// earliest, and by one from the first message's id.
func wsChunked(t *testing.T, ctx context.Context, base, topic string, tr *transcript) {
	c := wsDial(t, ctx, base, wsclient.Path("consumer", topic, "s", nil))
	produceChunked(t, brokerURLs()[0], topic)
	var firstID any
	for range wsChunkCount {
		m := wsNext(t, ctx, c)
		if firstID == nil {
			firstID = m["messageId"]
		}
		chunkedLine(t, tr, "got", m)
		wsSend(t, ctx, c, map[string]any{"messageId": m["messageId"]})
	}
	c.Close()
	again := wsRedial(t, ctx, base, wsclient.Path("consumer", topic, "s", nil))
	wsQuiet(t, again, 2*time.Second, tr, "again")
	again.Close()
	for _, from := range []string{"earliest", firstID.(string)} {
		r := wsDial(t, ctx, base, wsclient.Path("reader", topic, "", wsQ("messageId", from)))
		n := wsChunkCount
		if from != "earliest" {
			n--
		}
		for range n {
			chunkedLine(t, tr, "read", wsNext(t, ctx, r))
		}
		wsQuiet(t, r, time.Second, tr, "read then")
		r.Close()
	}
}

// chunkedLine adds what the transcript keeps of a chunked message: which it is, that it is
// whole, its chunks and redelivery count.
func chunkedLine(t *testing.T, tr *transcript, label string, m map[string]any) {
	t.Helper()
	i := wholeChunked(t, m)
	first, last := chunkedID(t, m)
	tr.add("%s key %d whole, %d chunks, redeliveryCount %v", label, i, last-first+1, m["redeliveryCount"])
}
