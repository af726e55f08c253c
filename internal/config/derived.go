package config

import (
	"slices"
	"strings"
)

// Values that follow from settings, computed here so that the wiring in cmd/ holds no
// arithmetic of its own; and the settings that others imply (derive), decided here only.

// maxMessagePadding is what Pulsar clients reserve in a frame for the command and the
// metadata around a message.
const maxMessagePadding = 10 << 10

// MaxMessageSize is what clients are told they may send (CONNECTED.max_message_size): the
// frame limit less the 10 KiB that clients reserve around a message, or half the frame limit
// when that is the smaller.
func (s Session) MaxMessageSize() int32 {
	if s.MaxFrameSize > 2*maxMessagePadding {
		return int32(s.MaxFrameSize - maxMessagePadding)
	}
	return int32(s.MaxFrameSize / 2)
}

// ProxyHeaderVersion is broker.proxyProtocol as the PROXY protocol version to send to
// brokers: 1, 2, or 0 for off.
func (b Broker) ProxyHeaderVersion() byte { return headerVersion(b.ProxyProtocol) }

// ProxyHeaderVersion is sni.proxyProtocol as a PROXY protocol version: 1, 2, or 0 for off.
func (s SNI) ProxyHeaderVersion() byte { return headerVersion(s.ProxyProtocol) }

func headerVersion(setting string) byte {
	switch setting {
	case "v1":
		return 1
	case "v2":
		return 2
	}
	return 0
}

// Implied is a setting that Load gave a value because another setting implies it: it could
// not work otherwise, or it says what the other would have to. An operator writes one line
// (broker.multiplex: true) and the settings it needs follow; check-config lists each.
type Implied struct {
	Key, Value string // the setting, and the value it took, as the file spells them
	Because    string // the setting that implies it, e.g. "broker.multiplex: true"
	// Overrode is set when the file or the environment gave Key another value, which could
	// not take effect (a warning says so).
	Overrode bool
}

// Implied are the settings Load derived from others, in the order of the rules.
func (c *Config) Implied() []Implied { return slices.Clone(c.implied) }

// implication is one rule of derive: when because (non-empty) names what implies it, key
// takes value (apply). A rule applies only to a key that the file and the environment left
// alone, but for always: then the key cannot take another value.
type implication struct {
	key, value string
	because    func(*Config) string
	apply      func(*Config)
	always     bool
}

// derive applies the implications of the settings that set (the paths the file or the
// environment gave a value) holds. This is the one place where one setting implies another.
func (c *Config) derive(set map[string]bool) {
	for _, r := range implications() {
		why := r.because(c)
		if why == "" || (set[r.key] && !r.always) {
			continue
		}
		r.apply(c)
		c.implied = append(c.implied, Implied{Key: r.key, Value: r.value, Because: why, Overrode: set[r.key]})
	}
}

func implications() []implication {
	return []implication{
		{key: "session.passthrough", value: "false", always: true, // passthrough is for direct sessions of their own
			because: func(c *Config) string {
				return when(c.Broker.Multiplex && c.Session.Passthrough, "broker.multiplex: true (a shared connection's frames are read to map their ids)")
			},
			apply: func(c *Config) { c.Session.Passthrough = false }},
		{key: "auth.enabled", value: "true",
			because: func(c *Config) string { return firstSet(c.Auth.Enabled, tokenKeys(c.Auth.Token)...) },
			apply:   func(c *Config) { c.Auth.Enabled = true }},
		{key: "authz.enabled", value: "true",
			because: func(c *Config) string { return firstSet(c.Authz.Enabled, "authz.policyFile", c.Authz.PolicyFile) },
			apply:   func(c *Config) { c.Authz.Enabled = true }},
		{key: "proxyProtocol.enabled", value: "true",
			because: func(c *Config) string {
				return when(!c.ProxyProtocol.Enabled && len(c.ProxyProtocol.TrustedCIDRs) > 0, "proxyProtocol.trustedCIDRs")
			},
			apply: func(c *Config) { c.ProxyProtocol.Enabled = true }},
		{key: "tls.clientAuth", value: "request",
			because: func(c *Config) string {
				return when(c.TLS.ClientAuth == "none", nonEmpty("tls.clientCAFile", c.TLS.ClientCAFile))
			},
			apply: func(c *Config) { c.TLS.ClientAuth = "request" }},
		{key: "discovery.metadataStore.tls.enabled", value: "true",
			because: func(c *Config) string { return storeTLSSetting(c.Discovery.MetadataStore.TLS) },
			apply:   func(c *Config) { c.Discovery.MetadataStore.TLS.Enabled = true }},
		{key: "broker.tls.enabled", value: "true",
			because: func(c *Config) string {
				return when(!c.Broker.TLS.Enabled && allTLS(c.Discovery.Static.Brokers), "discovery.static.brokers (all pulsar+ssl://)")
			},
			apply: func(c *Config) { c.Broker.TLS.Enabled = true }},
	}
}

// when is why if cond holds, else "" (nothing implies).
func when(cond bool, why string) string {
	if cond {
		return why
	}
	return ""
}

// nonEmpty is key when value is set.
func nonEmpty(key, value string) string { return when(value != "", key) }

// firstSet is the first key of pairs (key, value, key, value, ...) whose value is set, unless
// already is true (nothing left to imply).
func firstSet(already bool, pairs ...string) string {
	for i := 0; i+1 < len(pairs) && !already; i += 2 {
		if pairs[i+1] != "" {
			return pairs[i]
		}
	}
	return ""
}

// tokenKeys are the settings that give the keys clients' tokens are verified with.
func tokenKeys(t AuthToken) []string {
	return []string{"auth.token.secretKeyFile", t.SecretKeyFile, "auth.token.publicKeyFile", t.PublicKeyFile, "auth.token.jwksURL", t.JWKSURL}
}

// storeTLSSetting names the first TLS setting of the metadata store that is set while
// tls.enabled is not: each only applies over TLS.
func storeTLSSetting(t StoreTLS) string {
	if t.SkipHostnameVerification && !t.Enabled {
		return "discovery.metadataStore.tls.skipHostnameVerification"
	}
	return firstSet(t.Enabled, "discovery.metadataStore.tls.trustCertsFile", t.TrustCertsFile,
		"discovery.metadataStore.tls.certFile", t.CertFile, "discovery.metadataStore.tls.keyFile", t.KeyFile)
}

// allTLS: a non-empty list of broker URLs, all pulsar+ssl://.
func allTLS(brokers []string) bool {
	for _, b := range brokers {
		if !strings.HasPrefix(b, "pulsar+ssl://") {
			return false
		}
	}
	return len(brokers) > 0
}
