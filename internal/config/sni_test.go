package config

import (
	"strings"
	"testing"
)

// tlsBrokers is discovery of TLS brokers, which the SNI plane needs.
var tlsBrokers = []string{"PULSAR_PROXY_DISCOVERY_STATIC_BROKERS=pulsar+ssl://b0:6651", "PULSAR_PROXY_BROKER_TLS_ENABLED=true"}

func TestSNIListener(t *testing.T) {
	cfg, err := Load(writeFile(t, "listen: {pulsar: \"\", pulsarSNI: \"0.0.0.0:6652\"}\nsni: {serviceNames: [pulsar.example.com], proxyProtocol: v2}\n"), tlsBrokers)
	if err != nil {
		t.Fatalf("an SNI-only proxy is refused: %v", err)
	}
	if cfg.Listen.PulsarSNI != "0.0.0.0:6652" || cfg.SNI.ProxyHeaderVersion() != 2 || cfg.SNI.MaxClientHelloBytes != 16<<10 {
		t.Fatalf("sni settings: %+v %+v", cfg.Listen, cfg.SNI)
	}
	for _, tc := range []struct {
		what, yaml string
		env        []string
		want       string
	}{
		{"plaintext brokers", "listen: {pulsarSNI: \":6652\"}\n", brokersEnv, "listen.pulsarSNI: needs broker.tls.enabled"},
		{"with authentication", "listen: {pulsarSNI: \":6652\"}\nauth: {enabled: true, token: {secretKeyFile: k}}\n", tlsBrokers, "listen.pulsarSNI: cannot be on with auth.enabled"},
		{"with the policy", "listen: {pulsarSNI: \":6652\"}\nauth: {enabled: true, token: {secretKeyFile: k}}\nauthz: {enabled: true, policyFile: p}\n", tlsBrokers, "listen.pulsarSNI: cannot be on with authz.enabled"},
		{"the plaintext listener's address", "listen: {pulsarSNI: \"0.0.0.0:6650\"}\n", tlsBrokers, "listen.pulsarSNI: same address as listen.pulsar"},
		{"a bad address", "listen: {pulsarSNI: \"6652\"}\n", tlsBrokers, "listen.pulsarSNI: \"6652\": want host:port"},
		{"an IP as service name", "sni: {serviceNames: [\"10.0.0.1\"]}\n", tlsBrokers, "sni.serviceNames[0]"},
		{"a service name in capitals", "sni: {serviceNames: [Pulsar.Example.com]}\n", tlsBrokers, "sni.serviceNames[0]"},
		{"a wildcard service name", "sni: {serviceNames: [\"*.example.com\"]}\n", tlsBrokers, "sni.serviceNames[0]"},
		{"a tiny hello limit", "sni: {maxClientHelloBytes: 100}\n", tlsBrokers, "sni.maxClientHelloBytes"},
		{"an unknown PROXY version", "sni: {proxyProtocol: v3}\n", tlsBrokers, "sni.proxyProtocol"},
	} {
		_, err := Load(writeFile(t, tc.yaml), tc.env)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.what, err, tc.want)
		}
	}
}
