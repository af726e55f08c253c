package websocket

import (
	"context"
	"errors"
	"io"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/rs/zerolog"

	"github.com/pulsar-proxy/pulsar-proxy/internal/pulsarclient"
	"github.com/pulsar-proxy/pulsar-proxy/websocket/wsapi"
)

// session is one upgraded connection and its producer or consumer.
type session struct {
	s         *Server
	conn      *websocket.Conn
	client    *pulsarclient.Client
	kind      wsapi.Kind
	label     string
	log       zerolog.Logger
	serveKind func(*session)
	ctx       context.Context
	cancel    context.CancelFunc
	active    atomic.Int64 // unix nanoseconds of the last frame either way
	idle      *time.Timer
}

func newSession(q *request, conn *websocket.Conn, client *pulsarclient.Client, run func(*session)) *session {
	ctx, cancel := context.WithCancel(context.Background())
	ss := &session{s: q.s, conn: conn, client: client, kind: q.endpoint.Kind, label: q.label, serveKind: run, ctx: ctx, cancel: cancel,
		log: q.s.cfg.Logger.With().Str("plane", "websocket").Str("endpoint", q.label).Str("topic", q.endpoint.Topic).
			Str("remote", q.r.RemoteAddr).Str("principal", q.id.Role).Logger()}
	limit := q.s.cfg.MaxMessageSize
	if limit <= 0 {
		limit = 1 << 20
	}
	conn.SetReadLimit(limit)
	ss.touch()
	return ss
}

// run serves the session until it ends, then releases its broker connections.
func (ss *session) run() {
	m := ss.s.metrics
	m.opened.WithLabelValues(ss.label).Inc()
	m.sessions.WithLabelValues(ss.label).Inc()
	defer func() {
		ss.cancel()
		if ss.idle != nil {
			ss.idle.Stop()
		}
		ss.client.Close()
		ss.conn.CloseNow()
		m.sessions.WithLabelValues(ss.label).Dec()
		ss.s.ended(ss)
		ss.log.Debug().Msg("WebSocket session ended")
	}()
	if t := ss.s.cfg.IdleTimeout; t > 0 {
		ss.idle = time.AfterFunc(t, ss.checkIdle)
	}
	if p := ss.s.cfg.PingInterval; p > 0 {
		go ss.pings(p)
	}
	ss.log.Debug().Msg("WebSocket session open")
	ss.serveKind(ss)
}

func (ss *session) touch() { ss.active.Store(time.Now().UnixNano()) }

// checkIdle closes a session with no frame either way for IdleTimeout, as Jetty's idle
// timeout does (1001).
func (ss *session) checkIdle() {
	t := ss.s.cfg.IdleTimeout
	quiet := time.Since(time.Unix(0, ss.active.Load()))
	if quiet < t {
		ss.idle.Reset(t - quiet)
		return
	}
	ss.close(websocket.StatusGoingAway, "Connection Idle Timeout")
}

// pings sends a ping every interval (the client's pong counts as activity).
func (ss *session) pings(interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			ctx, cancel := context.WithTimeout(ss.ctx, interval)
			if ss.conn.Ping(ctx) == nil {
				ss.touch()
			}
			cancel()
		case <-ss.ctx.Done():
			return
		}
	}
}

// goAway closes the session because the proxy stops.
func (ss *session) goAway() { ss.close(websocket.StatusGoingAway, "pulsar-proxy is shutting down") }

// close closes the session with a status and reason, after the close handshake (a few
// seconds at most).
func (ss *session) close(code websocket.StatusCode, reason string) {
	if len(reason) > 120 { // a close frame's reason is at most 123 bytes
		reason = reason[:120]
	}
	ss.conn.Close(code, reason)
	ss.cancel()
}

// closeWith closes the session for one of the service's errors: 4000 plus its code, and its
// description. (The service closes with the bare code, 1 to 8, which RFC 6455 does not
// allow: its connection drops without a close frame.)
func (ss *session) closeWith(code wsapi.ErrorCode, detail string) {
	reason := code.Description()
	if detail != "" {
		reason += ": " + detail
	}
	ss.close(websocket.StatusCode(4000+int(code)), reason)
}

// read reads the next text message into buf (binary ones are ignored, as by the service).
func (ss *session) read(buf []byte) ([]byte, error) {
	for {
		typ, r, err := ss.conn.Reader(ss.ctx)
		if err != nil {
			return buf, err
		}
		buf = buf[:0]
		for {
			if len(buf) == cap(buf) {
				buf = append(buf, 0)[:len(buf)]
			}
			n, err := r.Read(buf[len(buf):cap(buf)])
			buf = buf[:len(buf)+n]
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return buf, err
			}
		}
		ss.touch()
		if typ == websocket.MessageText {
			return buf, nil
		}
	}
}

// write writes one text message.
func (ss *session) write(b []byte) error {
	err := ss.conn.Write(ss.ctx, websocket.MessageText, b)
	if err == nil {
		ss.touch()
	}
	return err
}

func httpCode(status int) string { return strconv.Itoa(status) }
