package e2e

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/test/wsclient"
)

// The WebSocket column of the client feature matrix: each feature over Pulsar's WebSocket
// API (test/wsclient), where the API has it; through the proxy's WebSocket endpoint, and for
// a failure again at a broker's own WebSocket service.

type mxWSFeature func(ctx context.Context, e matrixEnv) error

var mxWSFeatures = map[string]mxWSFeature{
	"produce-consume": func(ctx context.Context, e matrixEnv) error {
		return mxWSRoundtrip(ctx, e.WSURL, nil, e.Prefix+"-ws-pc", "", "")
	},
	"partitioned": func(ctx context.Context, e matrixEnv) error {
		return mxWSRoundtrip(ctx, e.WSURL, nil, e.Partitioned, "", "")
	},
	"sub-exclusive":  mxWSExclusive,
	"sub-shared":     func(ctx context.Context, e matrixEnv) error { return mxWSTwoConsumers(ctx, e, "Shared") },
	"sub-failover":   func(ctx context.Context, e matrixEnv) error { return mxWSTwoConsumers(ctx, e, "Failover") },
	"sub-key-shared": func(ctx context.Context, e matrixEnv) error { return mxWSTwoConsumers(ctx, e, "Key_Shared") },
	"batching-on": func(ctx context.Context, e matrixEnv) error {
		return mxWSRoundtrip(ctx, e.WSURL, nil, e.Prefix+"-ws-batch", "batchingEnabled=true&batchingMaxPublishDelay=100", "batched")
	},
	"batching-off": func(ctx context.Context, e matrixEnv) error {
		return mxWSRoundtrip(ctx, e.WSURL, nil, e.Prefix+"-ws-nobatch", "", "unbatched")
	},
	"compression-lz4":    mxWSCompression("LZ4"),
	"compression-zlib":   mxWSCompression("ZLIB"),
	"compression-zstd":   mxWSCompression("ZSTD"),
	"compression-snappy": mxWSCompression("SNAPPY"),
	"schema-json":        mxWSUnsupported("the WebSocket API carries payloads as base64 bytes; it has no schema"),
	"schema-avro":        mxWSUnsupported("the WebSocket API carries payloads as base64 bytes; it has no schema"),
	"regex-polling":      mxWSUnsupported("pattern consumers are /ws/v3/consumer (topicsPattern), which the proxy does not serve"),
	"regex-watcher":      mxWSUnsupported("pattern consumers are /ws/v3/consumer (topicsPattern), which the proxy does not serve"),
	"reader":             mxWSReader,
	"seek-id":            mxWSUnsupported("the WebSocket API has no seek"),
	"seek-time":          mxWSUnsupported("the WebSocket API has no seek"),
	"nack-redelivery":    mxWSNack,
	"dead-letter":        mxWSDeadLetter,
	"retry-topic":        mxWSUnsupported("the WebSocket API has no retry letter topic"),
	"delayed-delivery":   mxWSDelayed,
	"non-persistent": func(ctx context.Context, e matrixEnv) error {
		return mxWSRoundtrip(ctx, e.WSURL, nil, strings.Replace(e.Prefix, "persistent://", "non-persistent://", 1)+"-ws-np", "", "")
	},
	"exclusive-producer": mxWSUnsupported("the WebSocket API's producer has no access mode"),
	"termination":        mxWSTermination,
	"transactions":       mxWSUnsupported("the WebSocket API has no transactions"),
	"chunking":           mxWSUnsupported("the WebSocket API's producer does not chunk (its messages are at most websocket.maxTextMessageSize); its consumers and readers get chunked messages other clients produced whole (TestWebSocketChunkedMessages)"),
	"token-refresh":      mxWSUnsupported("a WebSocket session authenticates once, at its upgrade; nothing asks for its credentials again"),
	"tls":                mxWSTLS,
	"mtls":               mxWSMTLS,
}

// mxWebSocketColumn is the WebSocket column.
func mxWebSocketColumn() *matrixClient {
	return &matrixClient{name: "WebSocket", run: func(ctx context.Context, env matrixEnv, features []string) (map[string]cell, string, error) {
		cells := map[string]cell{}
		for _, id := range features {
			cells[id] = runWSFeature(ctx, env, id)
		}
		return cells, "the WebSocket API (v2 paths), test/wsclient", nil
	}}
}

func runWSFeature(ctx context.Context, env matrixEnv, id string) cell {
	f, ok := mxWSFeatures[id]
	if !ok {
		return cell{Result: cellUnsupported, Detail: "no such feature in the WebSocket column"}
	}
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	err := f(ctx, env)
	var u errUnsupported
	switch {
	case errors.As(err, &u):
		return cell{Result: cellUnsupported, Detail: u.Error()}
	case err != nil:
		return cell{Result: cellFail, Detail: err.Error()}
	}
	return cell{Result: cellPass}
}

func mxWSUnsupported(why string) mxWSFeature {
	return func(context.Context, matrixEnv) error { return errUnsupported(why) }
}

func mxWSCompression(codec string) mxWSFeature {
	return func(ctx context.Context, e matrixEnv) error {
		return mxWSRoundtrip(ctx, e.WSURL, nil, e.Prefix+"-ws-"+strings.ToLower(codec), "compressionType="+codec, "")
	}
}

// mxWSRoundtrip subscribes, produces 20 messages (producer query pq) and receives them all;
// batched / unbatched: their ids must say they were in a batch, or not.
func mxWSRoundtrip(ctx context.Context, base string, tc *tls.Config, topic, pq, batching string) error {
	c, err := wsclient.DialTLS(ctx, base, wsclient.Path("consumer", topic, "mx", nil), nil, tc)
	if err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	defer c.CloseNow()
	path := wsclient.Path("producer", topic, "", nil)
	if pq != "" {
		path += "?" + pq
	}
	p, err := wsclient.DialTLS(ctx, base, path, nil, tc)
	if err != nil {
		return fmt.Errorf("producer: %w", err)
	}
	defer p.CloseNow()
	const n = 20
	for i := 0; i < n; i++ {
		if err := p.Send(ctx, map[string]any{"payload": wsclient.Payload(fmt.Appendf(nil, "m-%d", i)), "key": fmt.Sprint("k", i%4)}); err != nil {
			return err
		}
	}
	for i := 0; i < n; i++ {
		if a, err := p.Next(ctx); err != nil || a["result"] != "ok" {
			return fmt.Errorf("ack %d: %v %v", i, a, err)
		}
	}
	seen := map[string]bool{}
	batched := 0
	for len(seen) < n {
		m, err := c.Next(ctx)
		if err != nil {
			return fmt.Errorf("after %d messages: %w", len(seen), err)
		}
		seen[string(wsclient.Decoded(m))] = true
		if inBatch(m["messageId"]) {
			batched++
		}
		if err := c.Send(ctx, map[string]any{"messageId": m["messageId"]}); err != nil {
			return err
		}
	}
	switch {
	case batching == "batched" && batched == 0:
		return errors.New("no message arrived in a batch")
	case batching == "unbatched" && batched > 0:
		return fmt.Errorf("%d messages arrived in batches", batched)
	}
	return nil
}

func inBatch(id any) bool {
	s, _ := id.(string)
	b, _ := base64.StdEncoding.DecodeString(s)
	var d pb.MessageIdData
	return proto.Unmarshal(b, &d) == nil && d.BatchIndex != nil
}

func mxWSExclusive(ctx context.Context, e matrixEnv) error {
	topic := e.Prefix + "-ws-excl"
	c, err := wsclient.Dial(ctx, e.WSURL, wsclient.Path("consumer", topic, "mx", nil), nil)
	if err != nil {
		return err
	}
	defer c.CloseNow()
	second, err := wsclient.Dial(ctx, e.WSURL, wsclient.Path("consumer", topic, "mx", nil), nil)
	if err == nil {
		second.CloseNow()
		return errors.New("a second consumer was let onto the Exclusive subscription")
	}
	if s := wsclient.StatusOf(err); s != 409 {
		return fmt.Errorf("the second consumer was refused with %d, want 409 (busy): %v", s, err)
	}
	return nil
}
