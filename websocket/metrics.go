package websocket

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulsar-proxy/pulsar-proxy/websocket/wsapi"
)

// Metrics of the WebSocket plane. Labels come from fixed sets: the endpoint kinds, the
// directions, the HTTP statuses of a refused upgrade.
type Metrics struct {
	sessions  *prometheus.GaugeVec
	opened    *prometheus.CounterVec
	refused   *prometheus.CounterVec
	messages  *prometheus.CounterVec
	bytes     *prometheus.CounterVec
	sendErrs  prometheus.Counter
	buffered  prometheus.Gauge
	bufferCap prometheus.Gauge
}

// Directions of pulsar_proxy_websocket_messages_total and _bytes_total.
const (
	dirProduced  = "produced"  // stored by a broker for a producer
	dirDelivered = "delivered" // written to a consumer or reader
)

// refusalCodes are the statuses a refused upgrade answers, each endpoint's series made at
// start so that a dashboard's rate() sees the first refusal.
var refusalCodes = []string{"400", "401", "403", "404", "409", "429", "500", "503", "504"}

// NewMetrics registers the plane's metrics with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		sessions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pulsar_proxy_websocket_sessions",
			Help: "WebSocket API sessions open now, by endpoint (producer, consumer, reader).",
		}, []string{"endpoint"}),
		opened: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulsar_proxy_websocket_sessions_opened_total",
			Help: "WebSocket API sessions opened (upgraded), by endpoint.",
		}, []string{"endpoint"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulsar_proxy_websocket_sessions_refused_total",
			Help: "WebSocket API requests answered with an error instead of an upgrade, by endpoint and HTTP status (400 bad path or parameters, 401, 403, 404, 409 busy, 429, 500, 503 over websocket.maxSessions, 504).",
		}, []string{"endpoint", "code"}),
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulsar_proxy_websocket_messages_total",
			Help: "Messages of WebSocket sessions: produced (stored by a broker) and delivered (written to the client).",
		}, []string{"direction"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulsar_proxy_websocket_payload_bytes_total",
			Help: "Payload bytes (decoded, before base64) of the messages of pulsar_proxy_websocket_messages_total.",
		}, []string{"direction"}),
		sendErrs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pulsar_proxy_websocket_send_errors_total",
			Help: "Producer messages answered send-error (bad JSON or payload, refused or timed out at the broker).",
		}),
		buffered: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pulsar_proxy_websocket_buffered_bytes",
			Help: "Payload bytes the WebSocket sessions hold now: producers' messages in flight to brokers and consumers' messages received ahead of their clients.",
		}),
		bufferCap: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pulsar_proxy_websocket_buffer_limit_bytes",
			Help: "The most payload bytes one WebSocket session holds before it stops reading (producer) or granting permits (consumer): websocket.maxBufferedBytes.",
		}),
	}
	for _, k := range []wsapi.Kind{wsapi.Producer, wsapi.Consumer, wsapi.Reader} {
		m.sessions.WithLabelValues(k.String())
		m.opened.WithLabelValues(k.String())
		for _, code := range refusalCodes {
			m.refused.WithLabelValues(k.String(), code)
		}
	}
	m.refused.WithLabelValues("none", "400") // a path that names no endpoint
	m.refused.WithLabelValues("none", "404")
	for _, d := range []string{dirProduced, dirDelivered} {
		m.messages.WithLabelValues(d)
		m.bytes.WithLabelValues(d)
	}
	if reg != nil {
		reg.MustRegister(m.sessions, m.opened, m.refused, m.messages, m.bytes, m.sendErrs, m.buffered, m.bufferCap)
	}
	return m
}

// Buffered is the gauge of pulsar_proxy_websocket_buffered_bytes, for the consumers'
// queues (pulsarclient.Config.Buffered).
func (m *Metrics) Buffered() prometheus.Gauge { return m.buffered }
