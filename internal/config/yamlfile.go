package config

import (
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"

	"gopkg.in/yaml.v3"
)

// loadFile sets what the YAML file at path sets. The file is walked key by key against the
// settings (walk), each value decoded on its own, so that every error names the key path, its
// line and, in plain words, what the key wants and what it was given; an unknown key is named
// with the nearest known one. set gets the path of every setting given a value.
func (c *Config) loadFile(path string, set map[string]bool) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	var doc yaml.Node
	err = dec.Decode(&doc)
	if errors.Is(err, io.EOF) {
		return nil // empty file, or only comments: nothing to override
	}
	if err != nil {
		return fmt.Errorf("%s: %s", path, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	// A second document would be ignored, and with it whatever it sets.
	if err := dec.Decode(new(yaml.Node)); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%s: more than one YAML document; put all settings in one", path)
	}
	d := newFileDecoder(c, path, set)
	if len(doc.Content) > 0 {
		d.section(doc.Content[0], "")
	}
	return errors.Join(d.errs...)
}

// fileDecoder walks one file's keys into a Config.
type fileDecoder struct {
	file     string
	root     reflect.Value
	settings map[string]setting  // by key path; sections too
	keys     map[string][]string // a section's key names by its path ("" is the top level)
	set      map[string]bool
	errs     []error
}

func newFileDecoder(c *Config, file string, set map[string]bool) *fileDecoder {
	d := &fileDecoder{file: file, root: reflect.ValueOf(c).Elem(), settings: map[string]setting{},
		keys: map[string][]string{}, set: set}
	walk(func(s setting) {
		d.settings[s.path] = s
		d.keys[parentPath(s.path)] = append(d.keys[parentPath(s.path)], lastName(s.path))
	})
	return d
}

func (d *fileDecoder) errorf(format string, args ...any) {
	d.errs = append(d.errs, fmt.Errorf("%s: %s", d.file, fmt.Sprintf(format, args...)))
}

// section decodes the keys of the section at prefix from n. YAML merge keys (<<: *anchor)
// are applied first, so that the section's own keys win wherever they stand, as YAML has it.
func (d *fileDecoder) section(n *yaml.Node, prefix string) {
	n = resolve(n)
	if isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		if prefix == "" {
			d.errorf("line %d: want sections of keys (listen:, discovery:, ...), got %s", n.Line, got(n))
		} else {
			d.errorf("%s: line %d: want a section of keys, got %s", prefix, n.Line, got(n))
		}
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].ShortTag() == "!!merge" {
			d.merge(n.Content[i+1], prefix)
		}
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.ShortTag() == "!!merge" {
			continue
		}
		if k.Kind != yaml.ScalarNode {
			d.errorf("line %d: want a key name, got %s", k.Line, got(k))
			continue
		}
		path := joinPath(prefix, k.Value)
		if first, dup := seen[k.Value]; dup {
			d.errorf("%s: line %d: set twice (first on line %d); keep one", path, k.Line, first)
			continue
		}
		seen[k.Value] = k.Line
		d.key(k, v, prefix)
	}
}

// key decodes one key of the section at prefix: a section, a setting, or an unknown key.
func (d *fileDecoder) key(k, v *yaml.Node, prefix string) {
	path := joinPath(prefix, k.Value)
	s, ok := d.settings[path]
	switch {
	case !ok:
		where := "at top level"
		if prefix != "" {
			where = "in " + prefix
		}
		guess, found := d.guess(k.Value, prefix)
		d.errorf("line %d: unknown key %q %s%s", k.Line, k.Value, where, didYouMean(guess, found))
	case s.env == "":
		d.section(v, path)
	default:
		d.setting(s, resolve(v))
	}
}

// merge applies a merge key's value: one section (an alias to it), or a list of them, where
// the earlier wins.
func (d *fileDecoder) merge(v *yaml.Node, prefix string) {
	v = resolve(v)
	if v.Kind != yaml.SequenceNode {
		d.section(v, prefix)
		return
	}
	for i := len(v.Content) - 1; i >= 0; i-- {
		d.section(v.Content[i], prefix)
	}
}

// setting decodes one setting's value. No value (`key:`) leaves the setting as it was, and
// empties a list, as YAML decoding into the struct did.
func (d *fileDecoder) setting(s setting, n *yaml.Node) {
	field := d.root.FieldByIndex(s.index)
	if isNull(n) {
		if field.Kind() == reflect.Slice {
			field.Set(reflect.Zero(field.Type()))
		}
		return
	}
	v, errs := decodeValue(s.field.Type, n)
	for _, e := range errs {
		if strings.HasPrefix(e, "[") {
			d.errorf("%s%s", s.path, e)
		} else {
			d.errorf("%s: %s", s.path, e)
		}
	}
	if errs == nil {
		field.Set(v)
		d.set[s.path] = true
	}
}

// guess is the key that an unknown name in the section at prefix probably meant: the key of
// that section or the one key elsewhere that is the same name but for letter case, else the
// nearest key of that section, else the one key elsewhere near it.
func (d *fileDecoder) guess(name, prefix string) (string, bool) {
	byName := map[string][]string{}
	var names []string
	walk(func(s setting) {
		if s.path == prefix || strings.HasPrefix(prefix, s.path+".") || parentPath(s.path) == prefix {
			return // the section, one around it, or a key of it (tried first)
		}
		n := lastName(s.path)
		if byName[n] == nil {
			names = append(names, n)
		}
		byName[n] = append(byName[n], s.path)
	})
	elsewhere := func(g string, ok bool) (string, bool) {
		if ok && len(byName[g]) == 1 {
			return byName[g][0], true
		}
		return "", false
	}
	for _, exact := range []bool{true, false} {
		if g, ok := nearestWithin(name, d.keys[prefix], exact); ok {
			return joinPath(prefix, g), true
		}
		if g, ok := elsewhere(nearestWithin(name, names, exact)); ok {
			return g, true
		}
	}
	return "", false
}
