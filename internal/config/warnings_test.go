package config

import (
	"slices"
	"testing"
)

// TestWarnings: what loads but should be looked at, each named by its key: the risky settings
// (PROXY headers trusted from everywhere, listeners without authentication off loopback), the
// settings that take no effect, and the admin API without a broker web service.
func TestWarnings(t *testing.T) {
	// Listeners on loopback, the admin API reaching its brokers: nothing to say.
	const (
		quietListen    = "listen: {pulsar: \"127.0.0.1:6650\", http: \"[::1]:8080\"}\n"
		quietDiscovery = "discovery: {static: {brokers: [\"pulsar://b:6650\"], webBrokers: [\"http://b:8080\"]}}\n"
		quiet          = quietListen + quietDiscovery
	)
	for _, tc := range []struct {
		name, yaml string
		want       []string // the warnings' keys, in order
	}{
		{"quiet", quiet, nil},
		{"the defaults", "discovery: {static: {brokers: [\"pulsar://b:6650\"]}}\n",
			[]string{"listen.pulsar", "listen.http", "discovery.static.webBrokers"}},
		{"every address", "listen: {pulsar: \":6650\", http: \"localhost:8080\"}\n" +
			"discovery: {static: {brokers: [\"pulsar://b:6650\"], webBrokers: [\"http://b:8080\"]}}\n", []string{"listen.pulsar"}},
		{"admin API off", "listen: {pulsar: \"127.0.0.1:6650\", http: \"0.0.0.0:8080\"}\nadmin: {enabled: false}\n" +
			"discovery: {static: {brokers: [\"pulsar://b:6650\"]}}\n", nil},
		{"the WebSocket API alone", "listen: {pulsar: \"127.0.0.1:6650\", http: \"0.0.0.0:8080\"}\nadmin: {enabled: false}\nwebsocket: {enabled: true}\n" +
			"discovery: {static: {brokers: [\"pulsar://b:6650\"]}}\n", []string{"listen.http"}},
		{"authenticated", "listen: {pulsar: \"0.0.0.0:6650\", http: \"0.0.0.0:8080\"}\nauth: {token: {secretKeyFile: /k}}\n" +
			"discovery: {static: {brokers: [\"pulsar://b:6650\"], webBrokers: [\"http://b:8080\"]}}\n", nil},
		{"TLS listeners", quietDiscovery + "listen: {pulsar: \"\", pulsarTLS: \"10.1.2.3:6651\", http: \"127.0.0.1:8080\"}\n" +
			"admin: {listenHTTPS: \"0.0.0.0:8443\"}\ntls: {certFile: c.pem, keyFile: k.pem}\n", []string{"listen.pulsarTLS", "admin.listenHTTPS"}},
		{"TLS listeners that require a certificate", quietDiscovery + "listen: {pulsar: \"\", pulsarTLS: \"10.1.2.3:6651\", http: \"127.0.0.1:8080\"}\n" +
			"admin: {listenHTTPS: \"0.0.0.0:8443\"}\ntls: {certFile: c.pem, keyFile: k.pem, clientCAFile: ca.pem, clientAuth: require}\n", nil},
		{"PROXY trust of every IPv4 source", quiet + "proxyProtocol: {trustedCIDRs: [10.0.0.0/8, 0.0.0.0/0]}\n", []string{"proxyProtocol.trustedCIDRs[1]"}},
		{"PROXY trust of every IPv6 source", quiet + "proxyProtocol: {trustedCIDRs: [\"::/0\"]}\n", []string{"proxyProtocol.trustedCIDRs[0]"}},
		{"PROXY off, trust listed", quiet + "proxyProtocol: {enabled: false, trustedCIDRs: [0.0.0.0/0]}\n", []string{"proxyProtocol.trustedCIDRs"}},
		{"multiplex over passthrough: true", quiet + "broker: {multiplex: true}\nsession: {passthrough: true}\n", []string{"session.passthrough"}},
		{"multiplex alone", quiet + "broker: {multiplex: true}\n", nil},
		{"TLS files without a TLS listener", quiet + "tls: {certFile: c.pem, keyFile: k.pem}\n", []string{"tls"}},
		{"a client CA not asked for", quietDiscovery + "listen: {pulsar: \"127.0.0.1:6650\", http: \"127.0.0.1:8080\", pulsarTLS: \"127.0.0.1:6651\"}\ntls: {certFile: c.pem, keyFile: k.pem, clientCAFile: ca.pem, clientAuth: none}\n", []string{"tls.clientCAFile"}},
		{"broker TLS files, TLS off", quiet + "broker: {tls: {trustCertsFile: ca.pem}}\n", []string{"broker.tls"}},
		{"broker hostnames unchecked", "listen: {pulsar: \"127.0.0.1:6650\", http: \"127.0.0.1:8080\"}\n" +
			"discovery: {static: {brokers: [\"pulsar+ssl://b:6651\"], webBrokers: [\"https://b:8443\"]}}\nbroker: {tls: {skipHostnameVerification: true}}\n",
			[]string{"broker.tls.skipHostnameVerification"}},
		{"a token key, auth off", quiet + "auth: {enabled: false, token: {secretKeyFile: /k}}\n", []string{"auth.token.secretKeyFile"}},
		{"a policy, authz off", quiet + "authz: {enabled: false, policyFile: /p.yaml}\n", []string{"authz.policyFile"}},
		{"basic credentials, auth off", quiet + "auth: {enabled: false, basic: {credentialsFile: /htpasswd}}\n", []string{"auth.basic.credentialsFile"}},
		{"advertised URLs, admin API off", quietDiscovery + "admin: {enabled: false}\nlisten: {pulsar: \"127.0.0.1:6650\", http: \"127.0.0.1:8080\", advertised: {http: \"http://proxy:8080\"}}\n", []string{"listen.advertised"}},
		{"client credentials forwarded, admin API on", quiet + "auth: {token: {secretKeyFile: /k}, forwardClientCredentials: true}\n", []string{"auth.forwardClientCredentials"}},
		{"a key set any application's tokens open", quiet + "auth: {token: {jwksURL: \"https://idp/keys\", issuers: [\"https://idp\"]}}\n", []string{"auth.token.audience"}},
		{"no broker web port", quietListen + "broker: {allowedWebPorts: []}\ndiscovery: {static: {brokers: [\"pulsar://b:6650\"]}}\n", []string{"discovery.static.webBrokers", "broker.allowedWebPorts"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Load(writeFile(t, tc.yaml), nil)
			if err != nil {
				t.Fatal(err)
			}
			var keys []string
			for _, w := range cfg.Warnings() {
				keys = append(keys, w.Key)
				if w.Message == "" {
					t.Errorf("%s: no message", w.Key)
				}
			}
			if !slices.Equal(keys, tc.want) {
				t.Errorf("warnings %q, want %q\n%+v", keys, tc.want, cfg.Warnings())
			}
		})
	}
}
