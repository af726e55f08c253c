package config

import (
	"crypto/tls"
	"fmt"
	"net/netip"
)

// TLSVersion is a TLS protocol version, written "1.0", "1.1", "1.2" or "1.3" in the file and
// the environment; its value is crypto/tls's (tls.VersionTLS12, …), so it converts to
// tls.Config.MinVersion as it is. A spelling outside those four is refused when the file or
// the environment is read (UnmarshalText), naming the key and its line or the variable.
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

// Prefixes is a list of IP prefixes in CIDR notation ("10.0.0.0/8", "fd00::/8"). It is a
// []netip.Prefix, so it can be handed on as one; each entry is parsed when the file or the
// environment is read (netip.Prefix.UnmarshalText), and a bad one is refused naming its key,
// its place in the list and its line, or the variable.
type Prefixes []netip.Prefix
