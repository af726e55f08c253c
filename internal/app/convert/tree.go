package convert

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// tree is the config.yaml being written: keys in the order they are first set, each leaf
// with a comment naming the proxy.conf settings it came from.
type tree struct {
	key      string
	value    any // string, int, bool, []string or []int; nil for a section
	comment  string
	children []*tree
}

// put sets the dotted key path (e.g. "listen.pulsar") to value, replacing an earlier value.
func (c *converter) put(path string, value any, comment string) { c.out.put(path, value, comment) }

func (t *tree) put(path string, value any, comment string) {
	n := t
	for _, part := range strings.Split(path, ".") {
		var next *tree
		for _, ch := range n.children {
			if ch.key == part {
				next = ch
				break
			}
		}
		if next == nil {
			next = &tree{key: part}
			n.children = append(n.children, next)
		}
		n = next
	}
	n.value, n.comment = value, comment
}

// get returns the value at path, or nil.
func (t *tree) get(path string) any {
	n := t
	for _, part := range strings.Split(path, ".") {
		var next *tree
		for _, ch := range n.children {
			if ch.key == part {
				next = ch
			}
		}
		if next == nil {
			return nil
		}
		n = next
	}
	return n.value
}

func (t *tree) strings(path string) []string {
	v, _ := t.get(path).([]string)
	return append([]string(nil), v...)
}

// render writes the tree as YAML with a header and the comments.
func (t *tree) render(source string) []byte {
	doc := t.node()
	doc.HeadComment = fmt.Sprintf("pulsar-proxy configuration converted from %s by `pulsar-proxy convert-config`.\n"+
		"Each setting names the proxy.conf setting it came from; what could not be carried over is\n"+
		"in the report convert-config printed. Every other key keeps pulsar-proxy's default\n"+
		"(config.example.yaml documents them all).", source)
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		panic(err) // only our own nodes are encoded
	}
	enc.Close()
	return b.Bytes()
}

func (t *tree) node() *yaml.Node {
	if t.value == nil {
		m := &yaml.Node{Kind: yaml.MappingNode}
		for _, ch := range t.children {
			k := &yaml.Node{Kind: yaml.ScalarNode, Value: ch.key}
			v := ch.node()
			if ch.value != nil && ch.comment != "" {
				k.HeadComment = "from " + ch.comment
			}
			m.Content = append(m.Content, k, v)
		}
		return m
	}
	switch v := t.value.(type) {
	case string:
		return &yaml.Node{Kind: yaml.ScalarNode, Value: v, Style: styleFor(v)}
	case int:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(v)}
	case bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(v)}
	case []string:
		s := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
		for _, e := range v {
			s.Content = append(s.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: e, Style: styleFor(e)})
		}
		return s
	case []int:
		s := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
		for _, e := range v {
			s.Content = append(s.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(e)})
		}
		return s
	}
	panic(fmt.Sprintf("convert: a value of type %T", t.value))
}

// styleFor quotes a string that YAML would otherwise read as something else.
func styleFor(s string) yaml.Style {
	var probe any
	if err := yaml.Unmarshal([]byte(s), &probe); err != nil || probe == nil {
		return yaml.DoubleQuotedStyle
	}
	if str, ok := probe.(string); !ok || str != s {
		return yaml.DoubleQuotedStyle
	}
	if strings.ContainsAny(s, ":#{}[],&*!|>'\"%@`") {
		return yaml.DoubleQuotedStyle
	}
	return 0
}
