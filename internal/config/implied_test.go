package config

import (
	"reflect"
	"strings"
	"testing"
)

// TestImplied: a setting that implies another takes effect on its own line; an explicit
// contrary value wins (but for passthrough, which a multiplexed session cannot use), and
// Implied lists what was derived and why.
func TestImplied(t *testing.T) {
	const ms = "discovery: {metadataStore: {url: \"zk:z:2181\", tls: {trustCertsFile: /ca.pem}}}\n"
	for _, tc := range []struct {
		name, yaml string
		check      func(*Config) bool
		implied    string // the key Implied names; "" = nothing implied
		overrode   bool
	}{
		{"multiplex alone", "broker: {multiplex: true}", func(c *Config) bool { return c.Broker.Multiplex && !c.Session.Passthrough }, "session.passthrough", false},
		{"multiplex over passthrough: true", "broker: {multiplex: true}\nsession: {passthrough: true}", func(c *Config) bool { return !c.Session.Passthrough }, "session.passthrough", true},
		{"passthrough alone", "session: {passthrough: true}", func(c *Config) bool { return c.Session.Passthrough }, "", false},
		{"a token key", "auth: {token: {secretKeyFile: /k}}", func(c *Config) bool { return c.Auth.Enabled }, "auth.enabled", false},
		{"a token key, auth off", "auth: {enabled: false, token: {publicKeyFile: /k.pem}}", func(c *Config) bool { return !c.Auth.Enabled }, "", false},
		{"a policy", "auth: {token: {secretKeyFile: /k}}\nauthz: {policyFile: /p.yaml}", func(c *Config) bool { return c.Authz.Enabled }, "authz.enabled", false},
		{"a policy, authz off", "authz: {enabled: false, policyFile: /p.yaml}", func(c *Config) bool { return !c.Authz.Enabled }, "", false},
		{"trusted CIDRs", "proxyProtocol: {trustedCIDRs: [10.0.0.0/8]}", func(c *Config) bool { return c.ProxyProtocol.Enabled }, "proxyProtocol.enabled", false},
		{"trusted CIDRs, PROXY off", "proxyProtocol: {enabled: false, trustedCIDRs: [10.0.0.0/8]}", func(c *Config) bool { return !c.ProxyProtocol.Enabled }, "", false},
		{"a client CA", "tls: {clientCAFile: /ca.pem}", func(c *Config) bool { return c.TLS.ClientAuth == "request" }, "tls.clientAuth", false},
		{"a client CA, required", "tls: {clientCAFile: /ca.pem, clientAuth: require}", func(c *Config) bool { return c.TLS.ClientAuth == "require" }, "", false},
		{"a client CA, none", "tls: {clientCAFile: /ca.pem, clientAuth: none}", func(c *Config) bool { return c.TLS.ClientAuth == "none" }, "", false},
		{"a ZooKeeper CA", ms, func(c *Config) bool { return c.Discovery.MetadataStore.TLS.Enabled }, "discovery.metadataStore.tls.enabled", false},
		{"TLS brokers", "discovery: {static: {brokers: [\"pulsar+ssl://b:6651\"]}}", func(c *Config) bool { return c.Broker.TLS.Enabled }, "broker.tls.enabled", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := brokersEnv
			if strings.Contains(tc.yaml, "static:") || strings.Contains(tc.yaml, "metadataStore") {
				env = nil
			}
			cfg, err := Load(writeFile(t, tc.yaml), env)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(cfg) {
				t.Errorf("not in effect: %+v", cfg)
			}
			im := cfg.Implied()
			if tc.implied == "" {
				if len(im) != 0 {
					t.Errorf("implied %+v", im)
				}
				return
			}
			if len(im) == 0 {
				t.Fatalf("nothing implied, want %s", tc.implied)
			}
			if last := im[len(im)-1]; last.Key != tc.implied || last.Because == "" || last.Overrode != tc.overrode {
				t.Errorf("implied %+v, want %s (overrode %v)", im, tc.implied, tc.overrode)
			}
		})
	}
}

// TestImplicationsNameSettings: each rule names a real setting and a value of its type, so
// that what check-config prints can be pasted into a file as it is.
func TestImplicationsNameSettings(t *testing.T) {
	byPath := map[string]setting{}
	walk(func(s setting) { byPath[s.path] = s })
	for _, r := range implications() {
		s, ok := byPath[r.key]
		if !ok || s.env == "" {
			t.Errorf("%s: not a setting", r.key)
			continue
		}
		if _, err := parseVar(s.field.Type, r.value); err != nil {
			t.Errorf("%s: %q is not a value of it: %v", r.key, r.value, err)
		}
		// Nothing implies on the defaults.
		if why := r.because(defaults()); why != "" {
			t.Errorf("%s: implied on the defaults by %s", r.key, why)
		}
	}
	if !reflect.DeepEqual(withBrokers("pulsar://b:6650").Implied(), []Implied(nil)) {
		t.Error("defaults imply something")
	}
}
