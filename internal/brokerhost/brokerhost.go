// Package brokerhost is the syntax of a broker's host and port, and the broker.allowedHosts
// patterns that match hosts. Config validation and the live set's target checks (package
// brokers) both use it, so what is accepted at load and what is dialled cannot disagree.
package brokerhost

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

const (
	maxName  = 253
	maxLabel = 63
)

// ParseURL parses pulsar://host:port or pulsar+ssl://host:port (scheme in any case, one
// trailing '/' tolerated) and returns whether it is TLS and its lower-cased host and port.
// Paths, users, queries and fragments are refused: they mean nothing for a broker endpoint.
func ParseURL(raw string) (tls bool, host, port string, err error) {
	scheme, rest, ok := strings.Cut(raw, "://")
	switch strings.ToLower(scheme) {
	case "pulsar":
	case "pulsar+ssl":
		tls = true
	default:
		ok = false
	}
	if !ok {
		return false, "", "", errors.New("scheme must be pulsar:// or pulsar+ssl://")
	}
	rest = strings.TrimSuffix(rest, "/")
	if strings.ContainsAny(rest, "/?#@") {
		return false, "", "", errors.New("only scheme://host:port is allowed, without path, query or credentials")
	}
	host, port, err = SplitHostPort(rest)
	return tls, host, port, err
}

// ParseWebURL parses a broker's web service URL, http://host:port or https://host:port (scheme
// in any case, one trailing '/' tolerated), and returns whether it is https and its lower-cased
// host and port. The port is required: a broker's web port is rarely the scheme's default, and
// an implied one would be a second spelling of the same endpoint. Paths, users, queries and
// fragments are refused.
func ParseWebURL(raw string) (tls bool, host, port string, err error) {
	scheme, rest, ok := strings.Cut(raw, "://")
	switch strings.ToLower(scheme) {
	case "http":
	case "https":
		tls = true
	default:
		ok = false
	}
	if !ok {
		return false, "", "", errors.New("scheme must be http:// or https://")
	}
	rest = strings.TrimSuffix(rest, "/")
	if strings.ContainsAny(rest, "/?#@") {
		return false, "", "", errors.New("only scheme://host:port is allowed, without path, query or credentials")
	}
	host, port, err = SplitHostPort(rest)
	return tls, host, port, err
}

// SplitHostPort splits host:port, or [IPv6]:port, checking both halves (see CheckHost and
// checkPort). The host comes back lower-cased and without brackets.
func SplitHostPort(hp string) (host, port string, err error) {
	if strings.HasPrefix(hp, "[") {
		end := strings.IndexByte(hp, ']')
		if end < 0 || !strings.HasPrefix(hp[end+1:], ":") {
			return "", "", errors.New("want [IPv6 address]:port")
		}
		host, port = hp[1:end], hp[end+2:]
		if !strings.Contains(host, ":") {
			return "", "", fmt.Errorf("%q: brackets hold only an IPv6 address", host)
		}
	} else {
		i := strings.LastIndexByte(hp, ':')
		if i < 0 || hp[:i] == "" {
			return "", "", errors.New("host and port are required")
		}
		host, port = hp[:i], hp[i+1:]
		if strings.Contains(host, ":") {
			return "", "", fmt.Errorf("%q: an IPv6 address needs brackets, [%s]:port", host, host)
		}
	}
	if err := CheckHost(host); err != nil {
		return "", "", err
	}
	if err := checkPort(port); err != nil {
		return "", "", err
	}
	return strings.ToLower(host), port, nil
}

// checkPort accepts a decimal port from 1 to 65535 without sign or leading zeros, so that
// one port has one spelling.
func checkPort(p string) error {
	n := 0
	for i := 0; i < len(p); i++ {
		if p[i] < '0' || p[i] > '9' || i > 4 {
			n = -1
			break
		}
		n = n*10 + int(p[i]-'0')
	}
	if p == "" || p[0] == '0' || n < 1 || n > 65535 {
		return fmt.Errorf("port %q is not a number from 1 to 65535", p)
	}
	return nil
}

// CheckHost accepts an IP literal (IPv6 without brackets or zone) or a DNS name: labels of
// 1 to 63 letters, digits and '-', not starting or ending with '-', at most 253 characters in
// all, no empty label and no trailing dot. A name whose last label is numeric is refused:
// some resolvers read "127.1" or "0x7f000001" as an IPv4 address.
func CheckHost(h string) error {
	if strings.Contains(h, ":") {
		if a, err := netip.ParseAddr(h); err != nil || !a.Is6() || a.Zone() != "" {
			return fmt.Errorf("%q is not an IPv6 address", h)
		}
		return nil
	}
	if a, err := netip.ParseAddr(h); err == nil && a.Is4() {
		return nil
	}
	if err := checkName(h, false); err != nil {
		return fmt.Errorf("host %q: %v", h, err)
	}
	last := h[strings.LastIndexByte(h, '.')+1:]
	if numeric(last) {
		return fmt.Errorf("host %q: neither an IPv4 address nor a name (its last label is a number)", h)
	}
	return nil
}

// CheckPattern accepts a broker.allowedHosts pattern: a DNS name (see CheckHost) in which a
// label may also hold '*' (any run of characters within that label) and '?' (one character).
func CheckPattern(p string) error {
	return checkName(p, true)
}

func checkName(name string, glob bool) error {
	if name == "" {
		return errors.New("empty")
	}
	if len(name) > maxName {
		return fmt.Errorf("longer than %d characters", maxName)
	}
	for label := range strings.SplitSeq(name, ".") {
		if err := checkLabel(label, glob); err != nil {
			return err
		}
	}
	return nil
}

func checkLabel(l string, glob bool) error {
	switch {
	case l == "":
		return errors.New("empty label (a leading, trailing or double dot)")
	case len(l) > maxLabel:
		return fmt.Errorf("label %q is longer than %d characters", l, maxLabel)
	case l[0] == '-' || l[len(l)-1] == '-':
		return fmt.Errorf("label %q starts or ends with '-'", l)
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || glob && (c == '*' || c == '?')) {
			return fmt.Errorf("character %q is not allowed in label %q", c, l)
		}
	}
	return nil
}

// numeric reports a decimal or 0x-hex number, as inet_aton reads one part of an address.
func numeric(l string) bool {
	digits := "0123456789"
	if len(l) >= 2 && l[0] == '0' && (l[1] == 'x' || l[1] == 'X') {
		l, digits = l[2:], "0123456789abcdefABCDEF"
	}
	return strings.Trim(l, digits) == ""
}

// Match reports whether host matches pattern label by label: both have the same number of
// dot-separated labels and each host label matches the pattern's label, case-insensitively.
// A '*' never crosses a dot, so "pulsar-broker-*" matches "pulsar-broker-1" but not
// "pulsar-broker-1.evil.example". An IPv6 literal matches no pattern (none can spell one).
func Match(pattern, host string) bool {
	if strings.Contains(host, ":") {
		return false
	}
	pattern, host = strings.ToLower(pattern), strings.ToLower(host)
	for {
		p, prest, pmore := strings.Cut(pattern, ".")
		h, hrest, hmore := strings.Cut(host, ".")
		if pmore != hmore || !matchLabel(p, h) {
			return false
		}
		if !pmore {
			return true
		}
		pattern, host = prest, hrest
	}
}

// matchLabel matches one label against a glob where '*' is any run of characters and '?'
// one character; nothing else is special. One backtrack point (the last '*') suffices.
func matchLabel(glob, label string) bool {
	g, l := 0, 0
	star, mark := -1, 0
	for l < len(label) {
		switch {
		case g < len(glob) && glob[g] == '*':
			star, mark = g, l
			g++
		case g < len(glob) && (glob[g] == '?' || glob[g] == label[l]):
			g++
			l++
		case star >= 0:
			mark++
			g, l = star+1, mark
		default:
			return false
		}
	}
	for g < len(glob) && glob[g] == '*' {
		g++
	}
	return g == len(glob)
}
