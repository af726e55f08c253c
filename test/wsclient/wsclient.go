// Package wsclient is a client of Pulsar's WebSocket API for the end-to-end tests and the
// benchmark: it dials an endpoint (a broker's own WebSocket service or the proxy's), sends
// JSON and reads the answers, and tells a refused upgrade's HTTP status and a close's code.
package wsclient

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/coder/websocket"
)

// Conn is one session. Reads are one at a time: a read NextWithin gave up on stays pending
// and is the next one.
type Conn struct {
	c       *websocket.Conn
	pending chan readResult
}

type readResult struct {
	b   []byte
	err error
}

// Refused is an upgrade answered with an HTTP status instead.
type Refused struct {
	Status int
	Body   string
}

func (r *Refused) Error() string { return fmt.Sprintf("HTTP %d: %s", r.Status, r.Body) }

// Dial opens a session at base (ws://host:port) + path (with its query); header may be nil.
func Dial(ctx context.Context, base, path string, header http.Header) (*Conn, error) {
	return DialTLS(ctx, base, path, header, nil)
}

// DialTLS is Dial to a wss:// base with a TLS configuration of its own (nil: the defaults).
func DialTLS(ctx context.Context, base, path string, header http.Header, tc *tls.Config) (*Conn, error) {
	opts := &websocket.DialOptions{HTTPHeader: header}
	if tc != nil {
		opts.HTTPClient = &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
	}
	c, resp, err := websocket.Dial(ctx, base+path, opts)
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			return nil, &Refused{Status: resp.StatusCode, Body: string(b)}
		}
		return nil, err
	}
	c.SetReadLimit(64 << 20)
	return &Conn{c: c}, nil
}

// StatusOf is the HTTP status of a refused Dial, 101 for none, 0 for another error.
func StatusOf(err error) int {
	var r *Refused
	switch {
	case err == nil:
		return http.StatusSwitchingProtocols
	case errors.As(err, &r):
		return r.Status
	}
	return 0
}

// Send writes v as JSON.
func (c *Conn) Send(ctx context.Context, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return c.SendRaw(ctx, string(b))
}

// SendRaw writes one text message as it is.
func (c *Conn) SendRaw(ctx context.Context, s string) error {
	return c.c.Write(ctx, websocket.MessageText, []byte(s))
}

// Next reads the next message as a JSON object.
func (c *Conn) Next(ctx context.Context) (map[string]any, error) {
	b, err := c.NextRaw(ctx)
	if err != nil {
		return nil, err
	}
	return object(b)
}

func object(b []byte) (map[string]any, error) {
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("not a JSON object: %q: %w", b, err)
	}
	return m, nil
}

// NextRaw reads the next message.
func (c *Conn) NextRaw(ctx context.Context) ([]byte, error) {
	ch := c.read()
	select {
	case r := <-ch:
		c.pending = nil
		return r.b, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// read is the pending read, or a new one.
func (c *Conn) read() chan readResult {
	if c.pending == nil {
		ch := make(chan readResult, 1)
		go func() {
			_, b, err := c.c.Read(context.Background())
			ch <- readResult{b, err}
		}()
		c.pending = ch
	}
	return c.pending
}

// NextWithin reads the next message if one comes within d; nil, nil when none does (the
// read stays pending: the next read gets what it gets).
func (c *Conn) NextWithin(d time.Duration) (map[string]any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	b, err := c.NextRaw(ctx)
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return object(b)
}

// CloseCode is the status of the close that ended a read (-1: the connection dropped without
// a close frame).
func CloseCode(err error) int { return int(websocket.CloseStatus(err)) }

// Close ends the session normally.
func (c *Conn) Close() { c.c.Close(websocket.StatusNormalClosure, "") }

// CloseNow drops the connection.
func (c *Conn) CloseNow() { c.c.CloseNow() }

// Payload is a message's payload field for bytes.
func Payload(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// Decoded is a received message's payload.
func Decoded(m map[string]any) []byte {
	s, _ := m["payload"].(string)
	b, _ := base64.StdEncoding.DecodeString(s)
	return b
}

// Path is an endpoint's path: kind (producer, consumer, reader) on topic
// (persistent://tenant/ns/name), with a subscription for a consumer, and query parameters.
func Path(kind, topic, subscription string, query url.Values) string {
	domain, rest, _ := cut(topic, "://")
	p := "/ws/v2/" + kind + "/" + domain + "/" + rest
	if subscription != "" {
		p += "/" + url.PathEscape(subscription)
	}
	if len(query) > 0 {
		p += "?" + query.Encode()
	}
	return p
}

func cut(s, sep string) (string, string, bool) {
	for i := 0; i+len(sep) <= len(s); i++ {
		if s[i:i+len(sep)] == sep {
			return s[:i], s[i+len(sep):], true
		}
	}
	return s, "", false
}
