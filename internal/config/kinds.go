package config

import (
	"encoding"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// kind is how an error names a type of setting: one value of it, and several (in a list).
type kind struct{ one, many string }

// kindOf names the types Config's settings have. A setting of a type missing here would be
// named by its Go type; TestEveryKindIsNamed keeps that from happening.
func kindOf(t reflect.Type) (kind, bool) {
	switch t {
	case reflect.TypeFor[time.Duration]():
		return kind{`a duration with its unit, such as "5s" or "2m"`, `durations with their units, such as "5s"`}, true
	case reflect.TypeFor[TLSVersion]():
		return kind{"a TLS version: 1.0, 1.1, 1.2 or 1.3", "TLS versions"}, true
	case reflect.TypeFor[netip.Prefix]():
		return kind{"a CIDR such as 10.0.0.0/8", "CIDRs such as 10.0.0.0/8"}, true
	}
	switch t.Kind() {
	case reflect.String:
		return kind{"a string", "strings"}, true
	case reflect.Bool:
		return kind{"true or false", "true or false values"}, true
	case reflect.Int, reflect.Int64:
		return kind{"a whole number", "whole numbers"}, true
	case reflect.Float64:
		return kind{"a number", "numbers"}, true
	}
	return kind{t.String(), t.String() + " values"}, false
}

// want is what a setting of type t must be given, in the words of an error.
func want(t reflect.Type) string {
	if t.Kind() == reflect.Slice {
		k, _ := kindOf(t.Elem())
		return "a list of " + k.many
	}
	k, _ := kindOf(t)
	return k.one
}

// got is what a YAML value is, in the words of an error.
func got(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a section of keys"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!str":
			return "a string " + quoteClipped(n.Value)
		case "!!int", "!!float":
			return "the number " + n.Value
		case "!!bool":
			return n.Value
		case "!!null":
			return "nothing"
		}
	}
	return quoteClipped(n.Value)
}

// quoteClipped quotes s for an error, cut short when long: an error quotes what it refuses,
// not a whole file pasted in the wrong place.
func quoteClipped(s string) string {
	const most = 60
	if r := []rune(s); len(r) > most {
		return fmt.Sprintf("%q…", string(r[:most]))
	}
	return fmt.Sprintf("%q", s)
}

// decodeValue decodes n as a value of type t. A list is decoded item by item, so that each
// bad item is named ("[1]") with its line; errs are messages without the key path.
func decodeValue(t reflect.Type, n *yaml.Node) (v reflect.Value, errs []string) {
	if t.Kind() != reflect.Slice {
		v, err := decodeScalar(t, n)
		if err != nil {
			return v, []string{fmt.Sprintf("line %d: want %s, got %s", n.Line, want(t), got(n))}
		}
		return v, nil
	}
	if n.Kind != yaml.SequenceNode {
		return v, []string{fmt.Sprintf("line %d: want %s, got %s", n.Line, want(t), got(n))}
	}
	out := reflect.MakeSlice(t, 0, len(n.Content))
	for i, item := range n.Content {
		item = resolve(item)
		e, err := decodeScalar(t.Elem(), item)
		if err != nil {
			errs = append(errs, fmt.Sprintf("[%d]: line %d: want %s, got %s", i, item.Line, want(t.Elem()), got(item)))
			continue
		}
		out = reflect.Append(out, e)
	}
	return out, errs
}

// decodeScalar decodes one scalar as a value of type t: a type that reads text (TLSVersion,
// netip.Prefix) from the scalar's text whatever YAML made of it (1.3 is a float to YAML),
// others as yaml.v3 decodes them.
func decodeScalar(t reflect.Type, n *yaml.Node) (reflect.Value, error) {
	p := reflect.New(t)
	if n.Kind != yaml.ScalarNode || n.ShortTag() == "!!null" {
		return p.Elem(), fmt.Errorf("not a scalar")
	}
	if k := t.Kind(); (k == reflect.Int || k == reflect.Int64) && n.ShortTag() == "!!float" {
		return p.Elem(), fmt.Errorf("not a whole number") // yaml.v3 would cut 1.5 to 1
	}
	if u, ok := p.Interface().(encoding.TextUnmarshaler); ok {
		return p.Elem(), u.UnmarshalText([]byte(n.Value))
	}
	return p.Elem(), n.Decode(p.Interface())
}

// resolve follows an alias (*name) to the value it stands for.
func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// isNull: a key given no value (`key:` or `key: ~`), which leaves its setting as it was.
func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// envWant is want for a variable: lists are comma-separated there.
func envWant(t reflect.Type) string {
	if t.Kind() == reflect.Slice {
		k, _ := kindOf(t.Elem())
		return "a comma-separated list of " + k.many
	}
	return want(t)
}

// joinPath is the key path of name in the section at prefix ("" is the top level).
func joinPath(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

// lastName is the last key of a path: "dialTimeout" of "broker.dialTimeout".
func lastName(path string) string {
	return path[strings.LastIndex(path, ".")+1:]
}

// parentPath is the path of the section a key is in: "broker" of "broker.tls", "" of "broker".
func parentPath(path string) string {
	if i := strings.LastIndex(path, "."); i >= 0 {
		return path[:i]
	}
	return ""
}
