package wsapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// ProducerMessage is what a producer sends: one message (ProducerMessage in the service).
// Fields the service reads but ignores (sequenceId, disableReplication, the schema fields)
// are not kept.
type ProducerMessage struct {
	Payload             *string            `json:"payload"` // base64; nil: missing
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
// first JSON value, and scalars are taken where it wants strings.
func DecodeProducerMessage(b []byte) (ProducerMessage, error) {
	var m ProducerMessage
	fields, err := decodeObject(b)
	if err != nil {
		return m, err
	}
	for _, f := range []struct {
		key string
		dst any
	}{
		{"payload", &m.Payload}, {"properties", &m.Properties}, {"context", &m.Context}, {"key", &m.Key},
		{"replicationClusters", &m.ReplicationClusters}, {"eventTime", &m.EventTime}, {"deliverAt", &m.DeliverAt},
		{"deliverAfterMs", &m.DeliverAfterMs}, {"encryptionParam", &m.EncryptionParam},
		{"compressionType", &m.CompressionType}, {"uncompressedMessageSize", &m.UncompressedMessageSize},
	} {
		if raw, ok := fields[f.key]; ok {
			if err := json.Unmarshal(raw, f.dst); err != nil {
				return m, fmt.Errorf("field %q: %w", f.key, err)
			}
		}
	}
	return m, nil
}

// decodeObject reads the first JSON value of b, which must be an object (or null), into its
// fields by exact key.
func decodeObject(b []byte) (map[string]json.RawMessage, error) {
	var fields map[string]json.RawMessage
	if err := json.NewDecoder(bytes.NewReader(b)).Decode(&fields); err != nil {
		return nil, err
	}
	return fields, nil
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
	fields, err := decodeObject(b)
	if err != nil {
		return c, err
	}
	var typ *lenient
	for _, f := range []struct {
		key string
		dst any
	}{{"type", &typ}, {"messageId", &c.MessageID}, {"permitMessages", &c.PermitMessages}} {
		if raw, ok := fields[f.key]; ok {
			if err := json.Unmarshal(raw, f.dst); err != nil {
				return c, fmt.Errorf("field %q: %w", f.key, err)
			}
		}
	}
	if typ != nil {
		c.Type = typ.s
	}
	return c, nil
}

// EndOfTopicJSON answers isEndOfTopic.
func EndOfTopicJSON(reached bool) []byte {
	return []byte(`{"endOfTopic":` + strconv.FormatBool(reached) + `}`)
}
