package config

import (
	"crypto/tls"
	"fmt"
	"net/netip"

	"gopkg.in/yaml.v3"
)

// TLSVersion is a TLS protocol version, written "1.0", "1.1", "1.2" or "1.3" in the file and
// the environment; its value is crypto/tls's (tls.VersionTLS12, …), so it converts to
// tls.Config.MinVersion as it is. A spelling outside those four is refused when the file or
// the environment is read, naming the line or the variable.
type TLSVersion uint16

var tlsVersions = []struct {
	name string
	v    TLSVersion
}{{"1.0", tls.VersionTLS10}, {"1.1", tls.VersionTLS11}, {"1.2", tls.VersionTLS12}, {"1.3", tls.VersionTLS13}}

// String is the version as the configuration spells it ("1.2"); "" when unset.
func (v TLSVersion) String() string {
	if v == 0 {
		return ""
	}
	for _, tv := range tlsVersions {
		if tv.v == v {
			return tv.name
		}
	}
	return fmt.Sprintf("TLSVersion(%#04x)", uint16(v))
}

// UnmarshalText reads "1.0" … "1.3" (the environment).
func (v *TLSVersion) UnmarshalText(b []byte) error {
	for _, tv := range tlsVersions {
		if tv.name == string(b) {
			*v = tv.v
			return nil
		}
	}
	return fmt.Errorf("%q is not a TLS version: want 1.0, 1.1, 1.2 or 1.3", b)
}

// MarshalText writes the version as UnmarshalText reads it.
func (v TLSVersion) MarshalText() ([]byte, error) { return []byte(v.String()), nil }

// UnmarshalYAML reads a scalar as UnmarshalText does; an error names the line.
func (v *TLSVersion) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return lineError(n, "want a TLS version such as \"1.2\"")
	}
	if err := v.UnmarshalText([]byte(n.Value)); err != nil {
		return lineError(n, err.Error())
	}
	return nil
}

// Prefixes is a list of IP prefixes in CIDR notation ("10.0.0.0/8", "fd00::/8"). It is a
// []netip.Prefix, so it can be handed on as one; each entry is parsed when the file or the
// environment is read, and a bad one is refused naming its line or the variable.
type Prefixes []netip.Prefix

// UnmarshalYAML reads a sequence of CIDR strings.
func (p *Prefixes) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.SequenceNode {
		return lineError(n, "want a list of CIDRs such as [10.0.0.0/8]")
	}
	out := make(Prefixes, 0, len(n.Content))
	var errs []string
	for i, item := range n.Content {
		prefix, err := netip.ParsePrefix(item.Value)
		if item.Kind != yaml.ScalarNode || err != nil {
			errs = append(errs, fmt.Sprintf("line %d: [%d]: %q is not a CIDR (e.g. 10.0.0.0/8)", item.Line, i, item.Value))
			continue
		}
		out = append(out, prefix)
	}
	if errs != nil {
		return &yaml.TypeError{Errors: errs}
	}
	*p = out
	return nil
}

// lineError is a decoding error in yaml.v3's form, so that it is reported with the file's
// other errors, and with its line.
func lineError(n *yaml.Node, msg string) error {
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %s", n.Line, msg)}}
}
