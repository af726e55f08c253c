package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/test/rig"
	"github.com/pulsar-proxy/pulsar-proxy/test/wsclient"
	"google.golang.org/protobuf/proto"
)

// The WebSocket API differential: one script run against a broker's own WebSocket service
// (webSocketServiceEnabled=true in the rig) and against the proxy's, and what each returns
// compared, line by line, after the parts that differ by nature are normalized: message ids
// (each named by the order it first appeared in), publish times, error wording. Where the two
// differ on purpose the script says what each answers (docs/websocket.md lists them).

// wsProxyYAML turns the WebSocket API on.
const wsProxyYAML = "websocket:\n  enabled: true\n"

// wsBases are the two endpoints: the broker's service, then the proxy's.
func wsBases(t *testing.T) (broker, proxy string) {
	t.Helper()
	p := startProxy(t, brokerURLs(), wsProxyYAML)
	broker = "ws" + strings.TrimPrefix(theRig.Brokers[0].HTTP, "http")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A rig attached to (PULSAR_PROXY_RIG) may run without the brokers' WebSocket service.
	_, err := wsclient.Dial(ctx, broker, "/ws/v2/nothing/persistent/public/default/x", nil)
	if wsclient.StatusOf(err) == 0 {
		rig.Need(t, "the brokers' WebSocket service (webSocketServiceEnabled=true)", err)
	}
	return broker, "ws" + strings.TrimPrefix(p.HTTPURL, "http")
}

// transcript is what one run of a script saw, normalized.
type transcript struct {
	lines []string
	ids   map[string]string
	topic string
}

func newTranscript(topic string) *transcript {
	return &transcript{ids: map[string]string{}, topic: topic}
}

func (tr *transcript) add(format string, args ...any) {
	tr.lines = append(tr.lines, fmt.Sprintf(format, args...))
}

// id names a message id by the order it first appeared in ("id1", ...), with its partition
// and batch index, which both sides must agree on.
func (tr *transcript) id(s string) string {
	if n, ok := tr.ids[s]; ok {
		return n
	}
	n := fmt.Sprintf("id%d", len(tr.ids)+1)
	b, err := base64.StdEncoding.DecodeString(s)
	var d pb.MessageIdData
	if err != nil || proto.Unmarshal(b, &d) != nil {
		n = "bad-id:" + s
	} else if d.Partition != nil || d.BatchIndex != nil {
		n += fmt.Sprintf("(p%d,b%d)", d.GetPartition(), d.GetBatchIndex())
	}
	tr.ids[s] = n
	return n
}

var originID = regexp.MustCompile(`^\d+:\d+:-?\d+(:\d+)?$`)

// msg adds a message or ack: ids named, times and error texts reduced to their presence.
func (tr *transcript) msg(label string, m map[string]any) {
	norm := map[string]any{}
	for k, v := range m {
		switch k {
		case "messageId":
			norm[k] = tr.id(v.(string))
		case "publishTime":
			norm[k] = "<time>"
		case "errorMsg":
			norm[k] = "<text>"
		case "properties":
			props := map[string]any{}
			for pk, pv := range v.(map[string]any) {
				s, _ := pv.(string)
				switch {
				case pk == "REAL_TOPIC" && s == tr.topic:
					pv = "<topic>"
				case (pk == "ORIGIN_MESSAGE_ID" || pk == "ORIGIN_MESSAGE_IDY_TIME") && originID.MatchString(s):
					pv = "<ledger:entry:partition>"
				}
				props[pk] = pv
			}
			norm[k] = props
		default:
			norm[k] = v
		}
	}
	b, _ := json.Marshal(norm) // sorted keys
	tr.add("%s %s", label, b)
}

// wsScript is one scenario, run once per endpoint with a topic of its own.
type wsScript func(t *testing.T, ctx context.Context, base, topic string, tr *transcript)

// TestWebSocketDifferential runs every script against the broker's service and the proxy's
// and compares what they saw.
func TestWebSocketDifferential(t *testing.T) {
	broker, proxy := wsBases(t)
	scripts := []struct {
		name string
		run  wsScript
	}{
		{"produce-consume-ack", wsProduceConsumeAck},
		{"keys-properties-event-time", wsKeysAndProperties},
		{"pull-mode", wsPullMode},
		{"nack-redelivery", wsNackRedelivery},
		{"dead-letter", wsDeadLetter},
		{"readers", wsReaders},
		{"partitioned", wsPartitioned},
		{"v1-paths", wsV1Paths},
		{"names-and-modes", wsNamesAndModes},
		{"producer-errors", wsProducerErrors},
		{"consumer-errors", wsConsumerErrors},
		{"bad-requests", wsBadRequests},
		{"chunked", wsChunked},
	}
	for _, s := range scripts {
		t.Run(s.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var got [2]*transcript
			for i, base := range []string{broker, proxy} {
				topic := uniqueTopic(t, "ws-"+s.name)
				got[i] = newTranscript(topic)
				s.run(t, ctx, base, topic, got[i])
			}
			compareTranscripts(t, got[0], got[1])
		})
	}
}

func compareTranscripts(t *testing.T, broker, proxy *transcript) {
	t.Helper()
	n := max(len(broker.lines), len(proxy.lines))
	for i := 0; i < n; i++ {
		var b, p string
		if i < len(broker.lines) {
			b = broker.lines[i]
		}
		if i < len(proxy.lines) {
			p = proxy.lines[i]
		}
		if b != p {
			t.Errorf("line %d differs:\n  broker: %s\n  proxy:  %s", i+1, b, p)
		}
	}
	if t.Failed() {
		t.Logf("broker's transcript:\n  %s", strings.Join(broker.lines, "\n  "))
		t.Logf("proxy's transcript:\n  %s", strings.Join(proxy.lines, "\n  "))
	}
}

// dial opens a session or fails the test.
func wsDial(t *testing.T, ctx context.Context, base, path string) *wsclient.Conn {
	t.Helper()
	c, err := wsclient.Dial(ctx, base, path, nil)
	if err != nil {
		t.Fatalf("%s%s: %v", base, path, err)
	}
	t.Cleanup(c.CloseNow)
	return c
}

// next reads the next message or fails the test.
func wsNext(t *testing.T, ctx context.Context, c *wsclient.Conn) map[string]any {
	t.Helper()
	return wsNextWithin(t, ctx, c, 30*time.Second)
}

// wsNextWithin is wsNext waiting up to d.
func wsNextWithin(t *testing.T, ctx context.Context, c *wsclient.Conn, d time.Duration) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	m, err := c.Next(ctx)
	if err != nil {
		t.Fatalf("reading: %v", err)
	}
	return m
}

// quiet adds whether anything arrives within d ("nothing" when not).
func wsQuiet(t *testing.T, c *wsclient.Conn, d time.Duration, tr *transcript, label string) {
	t.Helper()
	m, err := c.NextWithin(d)
	switch {
	case err != nil:
		tr.add("%s closed %d", label, wsclient.CloseCode(err))
	case m == nil:
		tr.add("%s nothing", label)
	default:
		tr.msg(label+" unexpected", m)
	}
}

func wsSend(t *testing.T, ctx context.Context, c *wsclient.Conn, v any) {
	t.Helper()
	if err := c.Send(ctx, v); err != nil {
		t.Fatal(err)
	}
}

func wsSendRaw(t *testing.T, ctx context.Context, c *wsclient.Conn, s string) {
	t.Helper()
	if err := c.SendRaw(ctx, s); err != nil {
		t.Fatal(err)
	}
}

func wsQ(kv ...string) url.Values {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Set(kv[i], kv[i+1])
	}
	return v
}

// produce sends payloads (with their index as context) and adds each ack in turn.
func wsProduce(t *testing.T, ctx context.Context, base, topic string, tr *transcript, msgs ...map[string]any) {
	t.Helper()
	p := wsDial(t, ctx, base, wsclient.Path("producer", topic, "", nil))
	for i, m := range msgs {
		if _, ok := m["context"]; !ok {
			m["context"] = fmt.Sprint(i)
		}
		wsSend(t, ctx, p, m)
		tr.msg("ack", wsNext(t, ctx, p))
	}
	p.Close()
}

func wsPayload(s string) map[string]any {
	return map[string]any{"payload": wsclient.Payload([]byte(s))}
}

func wsSorted(lines []string) []string {
	out := append([]string(nil), lines...)
	sort.Strings(out)
	return out
}
