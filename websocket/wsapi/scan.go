package wsapi

import (
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
	if !json.Valid(b[i:end]) {
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
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1, true
		}
	}
	return 0, false
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
	for _, c := range s {
		if c == '\\' {
			return nil, false
		}
	}
	return s, true
}
