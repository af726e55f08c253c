package wsapi

import (
	"encoding/base64"
	"reflect"
	"sort"
	"strconv"
	"unicode/utf8"
)

var (
	stringType = reflect.TypeFor[string]()
	intType    = reflect.TypeFor[int64]()
)

// ConsumerMessage is one message delivered to a consumer or reader.
type ConsumerMessage struct {
	ID              string // encoded (MessageID.Encode)
	Payload         []byte
	Properties      map[string]string
	PublishTime     string
	RedeliveryCount uint32
	EventTime       string // "" for none
	Key             string
	HasKey          bool
	// Encryption is the encryption context of a message delivered undecrypted
	// (cryptoFailureAction=CONSUME); nil for others.
	Encryption *EncryptionContext
}

// EncryptionContext is what a client needs to decrypt a message itself.
type EncryptionContext struct {
	Keys                    []EncryptionKey
	Param                   []byte
	Algorithm               string
	CompressionType         string
	UncompressedMessageSize uint32
	BatchSize               int32 // 0: not a batch
}

// AppendJSON appends the message as the service writes it (its fields in the service's
// order, null ones left out, properties always present).
func (m *ConsumerMessage) AppendJSON(b []byte) []byte {
	b = append(b, `{"messageId":`...)
	b = appendString(b, m.ID)
	b = append(b, `,"payload":"`...)
	b = base64.StdEncoding.AppendEncode(b, m.Payload)
	b = append(b, `","properties":`...)
	b = appendMap(b, m.Properties)
	b = append(b, `,"publishTime":`...)
	b = appendString(b, m.PublishTime)
	b = append(b, `,"redeliveryCount":`...)
	b = strconv.AppendUint(b, uint64(m.RedeliveryCount), 10)
	if m.EventTime != "" {
		b = append(b, `,"eventTime":`...)
		b = appendString(b, m.EventTime)
	}
	if m.Encryption != nil {
		b = append(b, `,"encryptionContext":`...)
		b = m.Encryption.appendJSON(b)
	}
	if m.HasKey {
		b = append(b, `,"key":`...)
		b = appendString(b, m.Key)
	}
	return append(b, '}')
}

func (e *EncryptionContext) appendJSON(b []byte) []byte {
	b = append(b, `{"keys":{`...)
	for i, k := range e.Keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k.Name)
		b = append(b, `:{"keyValue":"`...)
		b = base64.StdEncoding.AppendEncode(b, k.Value)
		b = append(b, `","metadata":`...)
		b = appendMap(b, k.Metadata)
		b = append(b, '}')
	}
	b = append(b, `},"param":"`...)
	b = base64.StdEncoding.AppendEncode(b, e.Param)
	b = append(b, `","algorithm":`...)
	b = appendString(b, e.Algorithm)
	b = append(b, `,"compressionType":`...)
	b = appendString(b, e.CompressionType)
	b = append(b, `,"uncompressedMessageSize":`...)
	b = strconv.AppendUint(b, uint64(e.UncompressedMessageSize), 10)
	b = append(b, `,"batchSize":`...)
	if e.BatchSize > 0 {
		b = strconv.AppendInt(b, int64(e.BatchSize), 10)
	} else {
		b = append(b, "null"...)
	}
	return append(b, '}')
}

// appendMap writes a string map with its keys sorted, so the same message is written the
// same way.
func appendMap(b []byte, m map[string]string) []byte {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k)
		b = append(b, ':')
		b = appendString(b, m[k])
	}
	return append(b, '}')
}

const hexDigits = "0123456789abcdef"

// appendString writes s as a JSON string as Jackson escapes it: the quote, the backslash and
// control characters (the usual short forms where there is one), nothing else; bytes that
// are not UTF-8 become U+FFFD, as a Java client decodes them.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				b = append(b, "\ufffd"...)
			} else {
				b = append(b, s[i:i+size]...)
			}
			i += size
			continue
		}
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c == '\t':
			b = append(b, '\\', 't')
		case c == '\b':
			b = append(b, '\\', 'b')
		case c == '\f':
			b = append(b, '\\', 'f')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		default:
			b = append(b, c)
		}
		i++
	}
	return append(b, '"')
}
