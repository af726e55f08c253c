package wsapi

import (
	"encoding/json"
	"net/url"
	"sort"
	"strings"
)

// clientKeys reads encryptionKeys as the keys of a client that encrypts its messages
// itself: base64 of a JSON object {name: {keyValue: base64, metadata: {k: v}}}. Anything
// else (key names, as the service's own key reader takes them) is not client-side.
func clientKeys(q url.Values) ([]EncryptionKey, bool) {
	raw := q.Get("encryptionKeys")
	if raw == "" {
		return nil, false
	}
	b, err := DecodeBase64(strings.TrimSpace(raw))
	if err != nil {
		return nil, false
	}
	var m map[string]*struct {
		KeyValue []byte            `json:"keyValue"`
		Metadata map[string]string `json:"metadata"`
	}
	if json.Unmarshal(b, &m) != nil || len(m) == 0 {
		return nil, false
	}
	keys := make([]EncryptionKey, 0, len(m))
	for name, k := range m {
		if k == nil || k.KeyValue == nil || strings.TrimSpace(name) == "" {
			return nil, false
		}
		keys = append(keys, EncryptionKey{Name: strings.TrimSpace(name), Value: k.KeyValue, Metadata: k.Metadata})
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].Name < keys[j].Name })
	return keys, true
}
