package convert

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// property is one key=value of a Java properties file, with the line it starts on.
type property struct {
	Key, Value string
	Line       int
}

// readProperties reads the format of java.util.Properties.load, which Pulsar's configuration
// loader uses: '#' and '!' comment lines, a key ended by the first unescaped '=', ':' or white
// space, a line ending in an odd number of backslashes continued on the next, and the escapes
// \t \n \r \f \uXXXX (any other escaped character stands for itself). A key given twice keeps
// its last value, as Properties does; the earlier ones are returned in dup.
func readProperties(r io.Reader) (props []property, dup []property, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	index := map[string]int{}
	line := 0
	for sc.Scan() {
		line++
		start := line
		text := strings.TrimLeft(sc.Text(), " \t\f")
		if text == "" || text[0] == '#' || text[0] == '!' {
			continue
		}
		for continued(text) {
			text = text[:len(text)-1]
			if !sc.Scan() {
				break
			}
			line++
			text += strings.TrimLeft(sc.Text(), " \t\f")
		}
		key, value, err := splitProperty(text)
		if err != nil {
			return nil, nil, fmt.Errorf("line %d: %v", start, err)
		}
		p := property{Key: key, Value: strings.TrimSpace(value), Line: start}
		if i, ok := index[key]; ok {
			dup = append(dup, props[i])
			props[i] = p
			continue
		}
		index[key] = len(props)
		props = append(props, p)
	}
	return props, dup, sc.Err()
}

// continued reports whether a line ends in an odd number of backslashes.
func continued(s string) bool {
	n := 0
	for i := len(s) - 1; i >= 0 && s[i] == '\\'; i-- {
		n++
	}
	return n%2 == 1
}

// splitProperty splits a logical line into its unescaped key and value.
func splitProperty(s string) (key, value string, err error) {
	i := 0
	for i < len(s) {
		c := s[i]
		if c == '\\' {
			i += 2
			continue
		}
		if c == '=' || c == ':' || c == ' ' || c == '\t' || c == '\f' {
			break
		}
		i++
	}
	rawKey := s[:min(i, len(s))]
	rest := s[min(i, len(s)):]
	rest = strings.TrimLeft(rest, " \t\f")
	if rest != "" && (rest[0] == '=' || rest[0] == ':') {
		rest = strings.TrimLeft(rest[1:], " \t\f")
	}
	if key, err = unescape(rawKey); err != nil {
		return "", "", err
	}
	value, err = unescape(rest)
	return key, value, err
}

func unescape(s string) (string, error) {
	if !strings.Contains(s, `\`) {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 == len(s) {
			b.WriteByte(c)
			continue
		}
		i++
		switch s[i] {
		case 't':
			b.WriteByte('\t')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 'f':
			b.WriteByte('\f')
		case 'u':
			if i+5 > len(s) {
				return "", fmt.Errorf("malformed \\u escape in %q", s)
			}
			n, err := strconv.ParseUint(s[i+1:i+5], 16, 16)
			if err != nil {
				return "", fmt.Errorf("malformed \\u escape in %q", s)
			}
			b.WriteRune(rune(n))
			i += 4
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String(), nil
}
