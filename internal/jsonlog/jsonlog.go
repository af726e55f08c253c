// Package jsonlog holds the proxy's conventions for its JSON log lines, and the check that
// holds a log to them: one JSON object per line, no key twice in an object (jq and most log
// pipelines keep only one of two equal keys, so the other is silently lost), and durations
// as seconds in fields named *_seconds (a bare number such as drain_timeout:30000 does not
// say its unit).
package jsonlog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/rs/zerolog"
)

// Seconds adds the duration d to e as key+"_seconds", in seconds: the one way the proxy logs
// a duration (zerolog's Dur would log a bare number whose unit is a process-wide setting).
func Seconds(e *zerolog.Event, key string, d time.Duration) *zerolog.Event {
	return e.Float64(key+"_seconds", d.Seconds())
}

// CheckLine reports what is wrong with one log line: not a single JSON object, or a key that
// appears twice in one object (at any depth). encoding/json keeps the last of two equal keys
// without a word, so the line is read token by token.
func CheckLine(line []byte) error {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	if tok != json.Delim('{') {
		return fmt.Errorf("not a JSON object: starts with %v", tok)
	}
	if err := checkObject(dec, ""); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("more than one JSON value on the line")
	}
	return nil
}

// checkObject reads an object's members after its '{', through its '}'; path names it in
// errors.
func checkObject(dec *json.Decoder, path string) error {
	seen := map[string]bool{}
	for {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("bad JSON in %s: %w", where(path), err)
		}
		if tok == json.Delim('}') {
			return nil
		}
		key, ok := tok.(string)
		if !ok {
			return fmt.Errorf("bad JSON in %s: key %v", where(path), tok)
		}
		if seen[key] {
			return fmt.Errorf("duplicate key %q in %s", key, where(path))
		}
		seen[key] = true
		if err := checkValue(dec, path+"."+key); err != nil {
			return err
		}
	}
}

// checkValue reads one value, looking into objects and arrays.
func checkValue(dec *json.Decoder, path string) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("bad JSON at %s: %w", path, err)
	}
	switch tok {
	case json.Delim('{'):
		return checkObject(dec, path)
	case json.Delim('['):
		for i := 0; dec.More(); i++ {
			if err := checkValue(dec, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		if _, err := dec.Token(); err != nil { // the ']'
			return fmt.Errorf("bad JSON at %s: %w", path, err)
		}
	}
	return nil
}

func where(path string) string {
	if path == "" {
		return "the line"
	}
	return path[1:]
}

// Check reads a whole log, a JSON object per line, and returns one error per bad line
// (numbered from 1), at most limit of them (0: all).
func Check(log []byte, limit int) []error {
	var errs []error
	for n, line := range bytes.Split(log, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if err := CheckLine(line); err != nil {
			errs = append(errs, fmt.Errorf("line %d: %w: %s", n+1, err, clip(line)))
			if limit > 0 && len(errs) == limit {
				break
			}
		}
	}
	return errs
}

func clip(line []byte) []byte {
	const maxLen = 300
	if len(line) > maxLen {
		return append(line[:maxLen:maxLen], "..."...)
	}
	return line
}
