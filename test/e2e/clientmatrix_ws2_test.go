package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/test/wsclient"
)

// The WebSocket column's features with several sessions (clientmatrix_ws_test.go).

// mxWSTwoConsumers: two consumers of a subscription of type typ; Shared: both get messages,
// Failover: one gets them all, Key_Shared: each key goes to one of them.
func mxWSTwoConsumers(ctx context.Context, e matrixEnv, typ string) error {
	topic := e.Prefix + "-ws-" + typ
	var cs [2]*wsclient.Conn
	for i := range cs {
		c, err := wsclient.Dial(ctx, e.WSURL, wsclient.Path("consumer", topic, "mx", wsQ("subscriptionType", typ)), nil)
		if err != nil {
			return fmt.Errorf("consumer %d: %w", i, err)
		}
		defer c.CloseNow()
		cs[i] = c
	}
	const n = 40
	if err := mxWSProduce(ctx, e.WSURL, topic, n, func(i int) map[string]any {
		return map[string]any{"payload": wsclient.Payload(fmt.Appendf(nil, "m-%d", i)), "key": fmt.Sprint("k", i%4)}
	}); err != nil {
		return err
	}
	got, keys := [2]int{}, map[string]map[int]bool{}
	for total, quiet := 0, 0; total < n; {
		progressed := false
		for i, c := range cs {
			m, err := c.NextWithin(200 * time.Millisecond)
			if err != nil {
				return err
			}
			if m == nil {
				continue
			}
			progressed = true
			got[i]++
			total++
			k, _ := m["key"].(string)
			if keys[k] == nil {
				keys[k] = map[int]bool{}
			}
			keys[k][i] = true
			c.Send(ctx, map[string]any{"messageId": m["messageId"]})
		}
		if !progressed {
			if quiet++; quiet > 100 {
				return fmt.Errorf("received %d of %d", total, n)
			}
		}
	}
	switch typ {
	case "Shared":
		if got[0] == 0 || got[1] == 0 {
			return fmt.Errorf("one consumer got them all: %v", got)
		}
	case "Failover":
		if got[0] != 0 && got[1] != 0 {
			return fmt.Errorf("both consumers got messages: %v", got)
		}
	case "Key_Shared":
		for k, who := range keys {
			if len(who) > 1 {
				return fmt.Errorf("key %s went to both consumers", k)
			}
		}
	}
	return nil
}

func mxWSProduce(ctx context.Context, base, topic string, n int, msg func(i int) map[string]any) error {
	p, err := wsclient.Dial(ctx, base, wsclient.Path("producer", topic, "", nil), nil)
	if err != nil {
		return fmt.Errorf("producer: %w", err)
	}
	defer p.CloseNow()
	for i := 0; i < n; i++ {
		if err := p.Send(ctx, msg(i)); err != nil {
			return err
		}
		if a, err := p.Next(ctx); err != nil || a["result"] != "ok" {
			return fmt.Errorf("ack %d: %v %v", i, a, err)
		}
	}
	return nil
}

// mxWSReader: a reader from the earliest message, and one from a message id.
func mxWSReader(ctx context.Context, e matrixEnv) error {
	topic := e.Prefix + "-ws-reader"
	p, err := wsclient.Dial(ctx, e.WSURL, wsclient.Path("producer", topic, "", nil), nil)
	if err != nil {
		return err
	}
	defer p.CloseNow()
	var ids []any
	for i := 0; i < 3; i++ {
		p.Send(ctx, map[string]any{"payload": wsclient.Payload(fmt.Appendf(nil, "r-%d", i))})
		a, err := p.Next(ctx)
		if err != nil || a["result"] != "ok" {
			return fmt.Errorf("ack %d: %v %v", i, a, err)
		}
		ids = append(ids, a["messageId"])
	}
	for _, from := range []struct {
		id    string
		first int
	}{{"earliest", 0}, {ids[0].(string), 1}} {
		r, err := wsclient.Dial(ctx, e.WSURL, wsclient.Path("reader", topic, "", wsQ("messageId", from.id)), nil)
		if err != nil {
			return err
		}
		for i := from.first; i < 3; i++ {
			m, err := r.Next(ctx)
			if err != nil || string(wsclient.Decoded(m)) != fmt.Sprint("r-", i) {
				r.CloseNow()
				return fmt.Errorf("reader from %s: message %d arrived as %v (%v)", from.id, i, m, err)
			}
		}
		r.CloseNow()
	}
	return nil
}

func mxWSNack(ctx context.Context, e matrixEnv) error {
	topic := e.Prefix + "-ws-nack"
	c, err := wsclient.Dial(ctx, e.WSURL, wsclient.Path("consumer", topic, "mx", wsQ("subscriptionType", "Shared", "negativeAckRedeliveryDelay", "100")), nil)
	if err != nil {
		return err
	}
	defer c.CloseNow()
	if err := mxWSProduce(ctx, e.WSURL, topic, 1, func(int) map[string]any { return wsPayload("n") }); err != nil {
		return err
	}
	m, err := c.Next(ctx)
	if err != nil {
		return err
	}
	c.Send(ctx, map[string]any{"type": "negativeAcknowledge", "messageId": m["messageId"]})
	again, err := c.Next(ctx)
	if err != nil || again["messageId"] != m["messageId"] || again["redeliveryCount"] != 1.0 {
		return fmt.Errorf("after the negative ack: %v (%v)", again, err)
	}
	return nil
}

func mxWSDeadLetter(ctx context.Context, e matrixEnv) error {
	topic := e.Prefix + "-ws-dlq"
	dlq, err := wsclient.Dial(ctx, e.WSURL, wsclient.Path("consumer", topic+"-mx-DLQ", "dlq", wsQ("subscriptionInitialPosition", "Earliest")), nil)
	if err != nil {
		return err
	}
	defer dlq.CloseNow()
	c, err := wsclient.Dial(ctx, e.WSURL, wsclient.Path("consumer", topic, "mx",
		wsQ("subscriptionType", "Shared", "maxRedeliverCount", "1", "negativeAckRedeliveryDelay", "100")), nil)
	if err != nil {
		return err
	}
	defer c.CloseNow()
	if err := mxWSProduce(ctx, e.WSURL, topic, 1, func(int) map[string]any { return wsPayload("dead") }); err != nil {
		return err
	}
	for i := 0; i < 2; i++ {
		m, err := c.Next(ctx)
		if err != nil {
			return err
		}
		c.Send(ctx, map[string]any{"type": "negativeAcknowledge", "messageId": m["messageId"]})
	}
	m, err := dlq.Next(ctx)
	if err != nil || string(wsclient.Decoded(m)) != "dead" {
		return fmt.Errorf("dead-letter topic: %v (%v)", m, err)
	}
	return nil
}

// mxWSDelayed: a message delivered after 2 s arrives after a later undelayed one.
func mxWSDelayed(ctx context.Context, e matrixEnv) error {
	topic := e.Prefix + "-ws-delayed"
	c, err := wsclient.Dial(ctx, e.WSURL, wsclient.Path("consumer", topic, "mx", wsQ("subscriptionType", "Shared")), nil)
	if err != nil {
		return err
	}
	defer c.CloseNow()
	err = mxWSProduce(ctx, e.WSURL, topic, 2, func(i int) map[string]any {
		m := wsPayload(fmt.Sprint("d", i))
		if i == 0 {
			m["deliverAfterMs"] = 2000
		}
		return m
	})
	if err != nil {
		return err
	}
	for _, want := range []string{"d1", "d0"} {
		m, err := c.Next(ctx)
		if err != nil || string(wsclient.Decoded(m)) != want {
			return fmt.Errorf("got %v (%v), want %s", m, err, want)
		}
		c.Send(ctx, map[string]any{"messageId": m["messageId"]})
	}
	return nil
}

// mxWSTermination: a consumer of a terminated topic reads what it holds and then hears that
// it reached the end.
func mxWSTermination(ctx context.Context, e matrixEnv) error {
	c, err := wsclient.Dial(ctx, e.WSURL, wsclient.Path("consumer", e.Terminated, "mx", wsQ("subscriptionInitialPosition", "Earliest")), nil)
	if err != nil {
		return err
	}
	defer c.CloseNow()
	for i := 0; i < 3; i++ {
		m, err := c.Next(ctx)
		if err != nil {
			return err
		}
		c.Send(ctx, map[string]any{"messageId": m["messageId"]})
	}
	for try := 0; try < 50; try++ {
		c.Send(ctx, map[string]any{"type": "isEndOfTopic"})
		m, err := c.Next(ctx)
		if err != nil {
			return err
		}
		if m["endOfTopic"] == true {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return errors.New("isEndOfTopic stayed false")
}

// mxWSTLS: wss:// to the proxy's HTTPS listener, its certificate verified for 127.0.0.1.
func mxWSTLS(ctx context.Context, e matrixEnv) error {
	tc, err := mxWSTLSConfig(e, false)
	if err != nil {
		return err
	}
	return mxWSRoundtrip(ctx, e.WSSURL, tc, e.Prefix+"-ws-tls", "", "")
}

// mxWSMTLS: wss:// to a proxy that requires a client certificate, whose CN is the role.
func mxWSMTLS(ctx context.Context, e matrixEnv) error {
	tc, err := mxWSTLSConfig(e, true)
	if err != nil {
		return err
	}
	return mxWSRoundtrip(ctx, e.MTLSWSSURL, tc, e.Prefix+"-ws-mtls", "", "")
}

func mxWSTLSConfig(e matrixEnv, withCert bool) (*tls.Config, error) {
	if e.WSSURL == "" {
		return nil, errors.New("no wss:// endpoint")
	}
	pem, err := os.ReadFile(e.CAFile)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	tc := &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}
	if withCert {
		cert, err := tls.LoadX509KeyPair(e.CertFile, e.KeyFile)
		if err != nil {
			return nil, err
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}
