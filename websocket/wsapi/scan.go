package wsapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// member is one member of a JSON object: its key, unescaped, and its value as written.
type member struct {
	key   string
	value []byte
}

var errNotObject = errors.New("not a JSON object")

// members reads the first JSON value of b, which must be an object (or null: no members),
// into its members in order, without decoding their values: one pass to find where the
// object ends, encoding/json's validation of it, and nothing copied but escaped keys. What
// follows the object is ignored, as the service's reader ignores it.
func members(b []byte) ([]member, error) {
	i := skipSpace(b, 0)
	if i+4 <= len(b) && string(b[i:i+4]) == "null" {
		return nil, nil
	}
	if i >= len(b) || b[i] != '{' {
		if i < len(b) && json.Valid(b[i:]) {
			return nil, errNotObject
		}
		return nil, fmt.Errorf("%w: %q", errNotObject, clip(b[i:]))
	}
	end, spans, err := objectSpans(b, i)
	if err != nil {
		return nil, err
	}
	if !validObject(b[i:end], spans, i) {
		return nil, fmt.Errorf("malformed JSON object: %q", clip(b[i:end]))
	}
	out := make([]member, 0, len(spans)/4)
	for j := 0; j+3 < len(spans); j += 4 {
		key := b[spans[j]:spans[j+1]]
		var k string
		if err := json.Unmarshal(key, &k); err != nil {
			return nil, err
		}
		out = append(out, member{key: k, value: b[spans[j+2]:spans[j+3]]})
	}
	return out, nil
}

// objectSpans finds the end of the object that starts at b[i] and the spans of its top-level
// keys (with their quotes) and values: four offsets a member.
func objectSpans(b []byte, i int) (end int, spans []int, err error) {
	depth := 0
	expectKey := false
	for ; i < len(b); i++ {
		switch c := b[i]; c {
		case '"':
			j, ok := stringEnd(b, i)
			if !ok {
				return 0, nil, errors.New("unterminated string")
			}
			if depth == 1 && expectKey {
				spans = append(spans, i, j)
				expectKey = false
			} else if depth == 1 && len(spans)%4 == 3 {
				spans = append(spans, j) // a string value ends
			}
			i = j - 1
		case '{', '[':
			depth++
			if depth == 1 {
				expectKey = true
			}
		case '}', ']':
			depth--
			if depth == 1 && len(spans)%4 == 3 {
				spans = append(spans, i+1) // an object or array value ends
			}
			if depth == 0 {
				if len(spans)%4 == 3 {
					spans = append(spans, trimEnd(b, i))
				}
				return i + 1, spans, nil
			}
		case ':':
			if depth == 1 {
				spans = append(spans, skipSpace(b, i+1))
			}
		case ',':
			if depth == 1 {
				if len(spans)%4 == 3 {
					spans = append(spans, trimEnd(b, i)) // a number or literal ends
				}
				expectKey = true
			}
		}
	}
	return 0, nil, errors.New("unexpected end of JSON input")
}

// stringEnd is the offset just past the string that starts at b[i] (a quote).
func stringEnd(b []byte, i int) (int, bool) {
	for j := i + 1; j < len(b); {
		q := bytes.IndexByte(b[j:], '"')
		if q < 0 {
			return 0, false
		}
		bs := bytes.IndexByte(b[j:j+q], '\\')
		if bs < 0 {
			return j + q + 1, true
		}
		j += bs + 2 // past the escape and the character it escapes
	}
	return 0, false
}

// elideAbove: string values longer than this are not walked by encoding/json's validator
// (a large base64 payload is most of a message); their bytes are checked by whoever decodes
// them (base64 refuses anything but its alphabet).
const elideAbove = 256

// validObject validates obj (starting at offset base of the message) with encoding/json,
// each long string value without escapes replaced by an empty string.
func validObject(obj []byte, spans []int, base int) bool {
	var elided []byte
	last := 0
	for j := 0; j+3 < len(spans); j += 4 {
		v0, v1 := spans[j+2]-base, spans[j+3]-base
		if v1-v0 <= elideAbove || obj[v0] != '"' || bytes.IndexByte(obj[v0:v1], '\\') >= 0 {
			continue
		}
		elided = append(elided, obj[last:v0+1]...)
		last = v1 - 1
	}
	if elided == nil {
		return json.Valid(obj)
	}
	return json.Valid(append(elided, obj[last:]...))
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// trimEnd is the end of a number or literal that runs up to b[i] (a ',' or '}').
func trimEnd(b []byte, i int) int {
	for i > 0 && (b[i-1] == ' ' || b[i-1] == '\t' || b[i-1] == '\n' || b[i-1] == '\r') {
		i--
	}
	return i
}

func clip(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}

// plainString is a JSON string value's bytes when it has no escapes (nil, false otherwise).
func plainString(v []byte) ([]byte, bool) {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return nil, false
	}
	s := v[1 : len(v)-1]
	if bytes.IndexByte(s, '\\') >= 0 {
		return nil, false
	}
	return s, true
}
