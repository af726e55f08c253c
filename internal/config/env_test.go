package config

import (
	"strings"
	"testing"
)

// TestUnknownVariables: a PULSAR_PROXY_* variable that no setting reads is refused, with the
// variable that was probably meant; other variables are none of the proxy's business.
func TestUnknownVariables(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want string // "" = loads
	}{
		{"PULSAR_PROXY_BROKER_MULTIPLX=true", "environment: PULSAR_PROXY_BROKER_MULTIPLX: unknown variable; did you mean PULSAR_PROXY_BROKER_MULTIPLEX?"},
		{"PULSAR_PROXY_AUTH_TOKEN_SECRET_KEYFILE=/k", "did you mean PULSAR_PROXY_AUTH_TOKEN_SECRET_KEY_FILE?"},
		{"PULSAR_PROXY_LOG_LEVL=debug", "did you mean PULSAR_PROXY_LOG_LEVEL?"},
		{"PULSAR_PROXY_DNS_NAME=brokers.pulsar", "did you mean PULSAR_PROXY_DISCOVERY_DNS_NAME?"},            // a section left out
		{"PULSAR_PROXY_PROXY_PROTOCOL_ENABLE=true", "did you mean PULSAR_PROXY_PROXY_PROTOCOL_ENABLED?"},     // near
		{"PULSAR_PROXY_SESSION_MAX_FRAME_SIZE_BYTES=1", "did you mean PULSAR_PROXY_SESSION_MAX_FRAME_SIZE?"}, // a word too many
		{"PULSAR_PROXY_NOTHING_LIKE_ANY=1", "environment: PULSAR_PROXY_NOTHING_LIKE_ANY: unknown variable"},  // no guess
		{"PULSAR_PROXY_BROKER_MULTIPLX=", "environment: PULSAR_PROXY_BROKER_MULTIPLX: unknown variable"},     // empty, still misspelt
		{"PULSAR_PROXYBROKER_MULTIPLEX=true", ""},                                                            // not the prefix
		{"PULSAR_ADMIN_URL=http://a", ""},
	} {
		_, err := Load("", append([]string{tc.env}, brokersEnv...))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.env, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: err = %v\nwant %q", tc.env, err, tc.want)
		}
	}
	// No guess where nothing is near.
	_, err := Load("", append([]string{"PULSAR_PROXY_NOTHING_LIKE_ANY=1"}, brokersEnv...))
	if err == nil || strings.Contains(err.Error(), "did you mean") {
		t.Errorf("err = %v", err)
	}
}

// TestFileAndEnvironmentErrorsTogether: a misspelt key and a misspelt variable are reported in
// one run.
func TestFileAndEnvironmentErrorsTogether(t *testing.T) {
	_, err := Load(writeFile(t, "broker: {multiplx: true}"), append([]string{"PULSAR_PROXY_LOG_LEVL=debug"}, brokersEnv...))
	if err == nil || !strings.Contains(err.Error(), `unknown key "multiplx"`) || !strings.Contains(err.Error(), "PULSAR_PROXY_LOG_LEVL") {
		t.Errorf("err = %v", err)
	}
}

// TestKubernetesServiceLinks: Kubernetes gives every pod variables for each Service of its
// namespace; a Service named pulsar-proxy (Apache's chart's proxy) or pulsar-proxy-… yields
// PULSAR_PROXY_* ones. Those are not settings and must not stop the proxy; a variable that
// only looks like one (its value is not what Kubernetes writes) is still refused.
func TestKubernetesServiceLinks(t *testing.T) {
	links := []string{
		"PULSAR_PROXY_SERVICE_HOST=10.96.12.7",
		"PULSAR_PROXY_SERVICE_PORT=6650",
		"PULSAR_PROXY_SERVICE_PORT_PULSAR=6650",
		"PULSAR_PROXY_SERVICE_PORT_HTTP=8080",
		"PULSAR_PROXY_PORT=tcp://10.96.12.7:6650",
		"PULSAR_PROXY_PORT_6650_TCP=tcp://10.96.12.7:6650",
		"PULSAR_PROXY_PORT_6650_TCP_PROTO=tcp",
		"PULSAR_PROXY_PORT_6650_TCP_PORT=6650",
		"PULSAR_PROXY_PORT_6650_TCP_ADDR=10.96.12.7",
		"PULSAR_PROXY_PORT_8080_TCP_ADDR=fd00::12:7",
		"PULSAR_PROXY_HEADLESS_SERVICE_HOST=10.96.12.8", // Service pulsar-proxy-headless
		"PULSAR_PROXY_HEADLESS_PORT=udp://10.96.12.8:53",
	}
	if _, err := Load("", append(links, brokersEnv...)); err != nil {
		t.Fatalf("service links refused: %v", err)
	}
	for _, bad := range []string{
		"PULSAR_PROXY_SERVICE_HOST=not-an-ip",
		"PULSAR_PROXY_PORT=6650",
		"PULSAR_PROXY_PORT_6650_TCP_PROTO=http",
		"PULSAR_PROXY_PORT_6650_TCP_PORT=70000",
		"PULSAR_PROXY_DNS_PORT=6650", // a setting's name, misspelt: not a link
	} {
		if _, err := Load("", append([]string{bad}, brokersEnv...)); err == nil || !strings.Contains(err.Error(), "unknown variable") {
			t.Errorf("%s: err = %v", bad, err)
		}
	}
}
