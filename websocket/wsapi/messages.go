package wsapi

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// ProducerMessage is what a producer sends: one message (ProducerMessage in the service).
// Fields the service reads but ignores (sequenceId, disableReplication, the schema fields)
// are not kept.
type ProducerMessage struct {
	Payload *string `json:"payload"` // base64 with escapes; nil: missing, null or RawPayload
	// RawPayload is the payload's base64 as the message wrote it, when it has no escapes.
	RawPayload          []byte             `json:"-"`
	Properties          map[string]lenient `json:"properties"`
	Context             *lenient           `json:"context"`
	Key                 *lenient           `json:"key"`
	ReplicationClusters []string           `json:"replicationClusters"`
	EventTime           *lenient           `json:"eventTime"`
	DeliverAt           lenientInt         `json:"deliverAt"`
	DeliverAfterMs      lenientInt         `json:"deliverAfterMs"`
	// Client-side encryption (with the producer's encryptionKeys).
	EncryptionParam         *string  `json:"encryptionParam"`
	CompressionType         *string  `json:"compressionType"`
	UncompressedMessageSize *float64 `json:"uncompressedMessageSize"`
}

// DecodeProducerMessage reads one producer message as the service's JSON reader does: keys
// match exactly (a later duplicate wins), unknown ones are ignored, so is anything after the
// first JSON value, and scalars are taken where it wants strings. A payload without escapes
// is kept as the message's bytes (RawPayload), not copied into a string.
func DecodeProducerMessage(b []byte) (ProducerMessage, error) {
	var m ProducerMessage
	ms, err := members(b)
	if err != nil {
		return m, err
	}
	for _, f := range ms {
		if f.key == "payload" {
			if raw, ok := plainString(f.value); ok {
				m.RawPayload, m.Payload = raw, nil
				continue
			}
			m.RawPayload = nil
		}
		dst := m.field(f.key)
		if dst == nil {
			continue
		}
		if err := json.Unmarshal(f.value, dst); err != nil {
			return m, fmt.Errorf("field %q: %w", f.key, err)
		}
	}
	return m, nil
}

// field is where a member of that key goes; nil for a key the service ignores.
func (m *ProducerMessage) field(key string) any {
	switch key {
	case "payload":
		return &m.Payload
	case "properties":
		return &m.Properties
	case "context":
		return &m.Context
	case "key":
		return &m.Key
	case "replicationClusters":
		return &m.ReplicationClusters
	case "eventTime":
		return &m.EventTime
	case "deliverAt":
		return &m.DeliverAt
	case "deliverAfterMs":
		return &m.DeliverAfterMs
	case "encryptionParam":
		return &m.EncryptionParam
	case "compressionType":
		return &m.CompressionType
	case "uncompressedMessageSize":
		return &m.UncompressedMessageSize
	}
	return nil
}

var errNoPayload = errors.New("the message has no payload")

// HasPayload reports whether the message has a payload (a JSON null or none: no).
func (m *ProducerMessage) HasPayload() bool { return m.RawPayload != nil || m.Payload != nil }

// DecodePayload decodes the payload's base64 (padding optional, as Java's decoder takes it).
func (m *ProducerMessage) DecodePayload() ([]byte, error) {
	if m.RawPayload == nil {
		if m.Payload == nil {
			return nil, errNoPayload
		}
		return DecodeBase64(*m.Payload)
	}
	enc := base64.StdEncoding
	if len(m.RawPayload)%4 != 0 {
		enc = base64.RawStdEncoding
	}
	out := make([]byte, enc.DecodedLen(len(m.RawPayload)))
	n, err := enc.Decode(out, m.RawPayload)
	return out[:n], err
}

// ContextString is the request's context ("" and false when it has none).
func (m *ProducerMessage) ContextString() (string, bool) {
	if m.Context == nil || m.Context.null {
		return "", false
	}
	return m.Context.s, true
}

// lenient is a JSON string as Jackson reads one into a String: a string, or a number or
// boolean as written; null is kept apart.
type lenient struct {
	s    string
	null bool
}

func (l *lenient) UnmarshalJSON(b []byte) error {
	switch {
	case len(b) > 0 && b[0] == '"':
		return json.Unmarshal(b, &l.s)
	case string(b) == "null":
		l.null = true
		return nil
	case len(b) > 0 && (b[0] == '{' || b[0] == '['):
		return &json.UnmarshalTypeError{Value: "object", Type: stringType}
	}
	l.s = string(b)
	return nil
}

// String is the value ("" for null).
func (l lenient) String() string { return l.s }

// Null reports a JSON null.
func (l lenient) Null() bool { return l.null }

// lenientInt is a JSON number Jackson reads into a long: a number, or a string of one.
type lenientInt int64

func (n *lenientInt) UnmarshalJSON(b []byte) error {
	s := string(b)
	if s == "null" {
		return nil
	}
	if len(s) > 1 && s[0] == '"' {
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil {
			return &json.UnmarshalTypeError{Value: "number " + s, Type: intType}
		}
		v = int64(f)
	}
	*n = lenientInt(v)
	return nil
}

// PropertyMap is the message's properties; a null value is an error (a Pulsar property has
// a value), named by its key.
func (m *ProducerMessage) PropertyMap() (map[string]string, error) {
	if len(m.Properties) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(m.Properties))
	for k, v := range m.Properties {
		if v.null {
			return nil, fmt.Errorf("the property %q has no value", k)
		}
		out[k] = v.s
	}
	return out, nil
}

// ProducerAck answers a producer message: "ok" with the message's id, or "send-error:N".
type ProducerAck struct {
	Result        string `json:"result"`
	ErrorMsg      string `json:"errorMsg,omitempty"`
	MessageID     string `json:"messageId,omitempty"`
	Context       string `json:"context,omitempty"`
	hasContext    bool
	ErrorCode     int   `json:"errorCode"`
	SchemaVersion int64 `json:"schemaVersion"`
}

// AckOK is the answer to a message stored as id.
func AckOK(id string, context string, hasContext bool) ProducerAck {
	return ProducerAck{Result: "ok", MessageID: id, Context: context, hasContext: hasContext}
}

// AckError is the answer to a message that was not stored.
func AckError(code ErrorCode, msg string, context string, hasContext bool) ProducerAck {
	return ProducerAck{Result: "send-error:" + strconv.Itoa(int(code)), ErrorMsg: msg, Context: context, hasContext: hasContext}
}

// AppendJSON appends the ack as the service writes it (an empty context is kept when the
// message had one).
func (a ProducerAck) AppendJSON(b []byte) []byte {
	b = append(b, `{"result":`...)
	b = appendString(b, a.Result)
	if a.ErrorMsg != "" {
		b = append(b, `,"errorMsg":`...)
		b = appendString(b, a.ErrorMsg)
	}
	if a.MessageID != "" {
		b = append(b, `,"messageId":`...)
		b = appendString(b, a.MessageID)
	}
	if a.hasContext {
		b = append(b, `,"context":`...)
		b = appendString(b, a.Context)
	}
	b = append(b, `,"errorCode":`...)
	b = strconv.AppendInt(b, int64(a.ErrorCode), 10)
	b = append(b, `,"schemaVersion":`...)
	b = strconv.AppendInt(b, a.SchemaVersion, 10)
	return append(b, '}')
}

// ConsumerCommand is what a consumer or reader sends: an ack (any type but the others),
// "negativeAcknowledge", "permit" (pull mode), "unsubscribe" or "isEndOfTopic".
type ConsumerCommand struct {
	Type           string  `json:"type"`
	MessageID      *string `json:"messageId"`
	PermitMessages *int32  `json:"permitMessages"`
}

// DecodeConsumerCommand reads one consumer command (keys matched exactly, as for
// DecodeProducerMessage).
func DecodeConsumerCommand(b []byte) (ConsumerCommand, error) {
	var c ConsumerCommand
	ms, err := members(b)
	if err != nil {
		return c, err
	}
	for _, f := range ms {
		var err error
		switch f.key {
		case "type":
			var typ lenient
			err = json.Unmarshal(f.value, &typ)
			c.Type = typ.s
		case "messageId":
			err = json.Unmarshal(f.value, &c.MessageID)
		case "permitMessages":
			err = json.Unmarshal(f.value, &c.PermitMessages)
		}
		if err != nil {
			return c, fmt.Errorf("field %q: %w", f.key, err)
		}
	}
	return c, nil
}

// EndOfTopicJSON answers isEndOfTopic.
func EndOfTopicJSON(reached bool) []byte {
	return []byte(`{"endOfTopic":` + strconv.FormatBool(reached) + `}`)
}
