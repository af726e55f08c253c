package config

import (
	"slices"
	"strings"
	"testing"
)

func TestAdminValidation(t *testing.T) {
	const (
		web     = "PULSAR_PROXY_DISCOVERY_STATIC_WEB_BROKERS="
		workers = "PULSAR_PROXY_ADMIN_FUNCTION_WORKERS="
		https   = "PULSAR_PROXY_ADMIN_LISTEN_HTTPS="
	)
	checkEnvCases(t, []envCase{
		{[]string{web + "http://b:8080"}, ""},
		{[]string{web + "http://b:8080,http://c:8080"}, "discovery.static.webBrokers: 2 web service URLs for 1 brokers"},
		{[]string{web + "pulsar://b:8080"}, `discovery.static.webBrokers[0]: "pulsar://b:8080": scheme must be http:// or https://`},
		{[]string{web + "https://b:8443"}, `discovery.static.webBrokers[0]: "https://b:8443": https:// URLs go with broker.tls.enabled: true`},
		{[]string{web + "http://b:8080/admin"}, "only scheme://host:port"},
		{[]string{workers + "http://w0:6750,http://w1:6750"}, ""},
		{[]string{workers + "http://w0:6750,http://W0:6750"}, `admin.functionWorkers[1]: "http://W0:6750" is listed twice`},
		{[]string{workers + "http://w0"}, "admin.functionWorkers[0]"},
		{[]string{"PULSAR_PROXY_ADMIN_MAX_CONCURRENT_REQUESTS=0"}, "admin.maxConcurrentRequests: must be at least 1"},
		{[]string{"PULSAR_PROXY_ADMIN_MAX_CONCURRENT_REQUESTS_PER_PRINCIPAL=-1"}, "admin.maxConcurrentRequestsPerPrincipal: must be between 0 (a quarter of admin.maxConcurrentRequests, at most 16) and admin.maxConcurrentRequests (64), got -1"},
		{[]string{"PULSAR_PROXY_ADMIN_MAX_CONCURRENT_REQUESTS_PER_PRINCIPAL=65"}, "admin.maxConcurrentRequestsPerPrincipal: must be between 0 (a quarter of admin.maxConcurrentRequests, at most 16) and admin.maxConcurrentRequests (64), got 65"},
		{[]string{"PULSAR_PROXY_ADMIN_MAX_CONCURRENT_REQUESTS=8", "PULSAR_PROXY_ADMIN_MAX_CONCURRENT_REQUESTS_PER_PRINCIPAL=8"}, ""},
		{[]string{"PULSAR_PROXY_ADMIN_MIN_BODY_RATE=-1"}, "admin.minBodyRate: must be 0 (no floor) or greater, got -1"},
		{[]string{"PULSAR_PROXY_ADMIN_MIN_BODY_RATE=0"}, ""},
		{[]string{"PULSAR_PROXY_ADMIN_MIN_BODY_RATE_GRACE=0s"}, "admin.minBodyRateGrace: must be greater than 0"},
		{[]string{"PULSAR_PROXY_ADMIN_MAX_REQUEST_BODY_SIZE=100"}, "admin.maxRequestBodySize: must be at least 1024"},
		{[]string{"PULSAR_PROXY_ADMIN_MAX_SPOOLED_BYTES=1048576"}, "admin.maxSpooledBytes: must be at least admin.maxRequestBodySize (268435456), so that the largest body allowed can be kept, got 1048576"},
		{[]string{"PULSAR_PROXY_ADMIN_MAX_SPOOLED_BYTES=1048576", "PULSAR_PROXY_ADMIN_MAX_REQUEST_BODY_SIZE=1048576"}, ""},
		{[]string{"PULSAR_PROXY_ADMIN_MAX_REDIRECTS=0"}, "admin.maxRedirects: must be between 1 and 32"},
		{[]string{"PULSAR_PROXY_ADMIN_READ_TIMEOUT=0s"}, "admin.readTimeout: must be greater than 0"},
		{[]string{"PULSAR_PROXY_ADMIN_RESPONSE_TIMEOUT=-1s"}, "admin.responseTimeout"},
		{[]string{"PULSAR_PROXY_ADMIN_REQUEST_TIMEOUT=0s"}, "admin.requestTimeout"},
		{[]string{"PULSAR_PROXY_ADMIN_ACCESS_LOG=warn"}, `admin.accessLog: "warn" is not one of info|debug|off`},
		{[]string{https + "0.0.0.0:8443"}, "admin.listenHTTPS: needs tls.certFile and tls.keyFile"},
		{[]string{https + "0.0.0.0:8443", "PULSAR_PROXY_TLS_CERT_FILE=/c.pem", "PULSAR_PROXY_TLS_KEY_FILE=/k.pem"}, ""},
		{[]string{https + "0.0.0.0:8080", "PULSAR_PROXY_TLS_CERT_FILE=/c.pem", "PULSAR_PROXY_TLS_KEY_FILE=/k.pem"}, "admin.listenHTTPS: \"0.0.0.0:8080\" is already the address of another listener"},
		{[]string{"PULSAR_PROXY_DISCOVERY_DNS_NAME=b.example", "PULSAR_PROXY_DISCOVERY_DNS_WEB_PORT=70000"}, "discovery.dns.webPort: must be between 0 and 65535"},
	})
	cfg, err := Load(writeFile(t, `
discovery:
  static:
    brokers: [pulsar+ssl://b0:6651, pulsar+ssl://b1:6651]
    webBrokers: [https://b0:8443, https://b1:8443]
broker: {tls: {enabled: true}}
admin: {functionWorkers: [https://w0:6751], maxRequestBodySize: 1048576}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.Discovery.Static.WebBrokers, []string{"https://b0:8443", "https://b1:8443"}) ||
		!slices.Equal(cfg.Admin.FunctionWorkers, []string{"https://w0:6751"}) || cfg.Admin.MaxBodySize != 1<<20 {
		t.Errorf("yaml: %+v %+v", cfg.Discovery.Static, cfg.Admin)
	}
}

// broker.allowedWebPorts bounds the web services the admin API may send the proxy's
// credentials to; what configuration names itself is checked against it at load, naming the
// key, and an empty list means no port rather than any.
func TestAllowedWebPorts(t *testing.T) {
	const (
		ports = "PULSAR_PROXY_BROKER_ALLOWED_WEB_PORTS="
		web   = "PULSAR_PROXY_DISCOVERY_STATIC_WEB_BROKERS="
		dns   = "PULSAR_PROXY_DISCOVERY_DNS_NAME=b.example"
	)
	checkEnvCases(t, []envCase{
		{[]string{web + "http://b:8080"}, ""},
		{[]string{web + "http://b:9090"}, `discovery.static.webBrokers[0]: "http://b:9090": port 9090 is not in broker.allowedWebPorts [8080 8443]`},
		{[]string{web + "http://169.254.169.254:80"}, `discovery.static.webBrokers[0]: "http://169.254.169.254:80": port 80 is not in broker.allowedWebPorts`},
		{[]string{web + "http://b:9090", ports + "9090"}, ""},
		{[]string{ports + "8080,0,65536"}, "broker.allowedWebPorts[1]: must be between 1 and 65535, got 0"},
		{[]string{ports + "8080,0,65536"}, "broker.allowedWebPorts[2]: must be between 1 and 65535, got 65536"},
		{[]string{ports + "http"}, "PULSAR_PROXY_BROKER_ALLOWED_WEB_PORTS"},
		{[]string{dns}, ""}, // webPort 8080 by default
		{[]string{dns, "PULSAR_PROXY_DISCOVERY_DNS_WEB_PORT=9090"}, "discovery.dns.webPort: 9090 is not in broker.allowedWebPorts [8080 8443]"},
		{[]string{dns, "PULSAR_PROXY_DISCOVERY_DNS_WEB_PORT=0"}, ""},
		{[]string{"PULSAR_PROXY_DISCOVERY_DNS_WEB_PORT=9090"}, ""}, // no DNS discovery: not used
	})
	for _, tc := range []struct{ yaml, want string }{
		{"broker: {allowedWebPorts: []}\ndiscovery: {static: {brokers: [pulsar://b:6650]}}", ""},
		{"broker: {allowedWebPorts: []}\ndiscovery: {static: {brokers: [pulsar://b:6650], webBrokers: [http://b:8080]}}",
			`discovery.static.webBrokers[0]: "http://b:8080": port 8080 is not in broker.allowedWebPorts []`},
		{"broker: {allowedWebPorts: []}\ndiscovery: {dns: {name: b.example}}", "discovery.dns.webPort: 8080 is not in broker.allowedWebPorts []"},
		{"broker: {allowedWebPorts: []}\ndiscovery: {dns: {name: b.example, webPort: 0}}", ""},
	} {
		cfg, err := Load(writeFile(t, tc.yaml), nil)
		switch {
		case tc.want == "" && (err != nil || len(cfg.Broker.AllowedWebPorts) != 0):
			t.Errorf("%s: %v", tc.yaml, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: err = %v, want %q", tc.yaml, err, tc.want)
		}
	}
	cfg, err := Load("", append([]string{ports + "8080,18080"}, brokersEnv...))
	if err != nil || !slices.Equal(cfg.Broker.AllowedWebPorts, []int{8080, 18080}) {
		t.Errorf("from the environment: %v %v", cfg, err)
	}
	if d := defaults().Broker.AllowedWebPorts; !slices.Equal(d, []int{8080, 8443}) {
		t.Errorf("default %v, want Pulsar's web ports [8080 8443]", d)
	}
}

// Lowering maxConcurrentRequests alone keeps the per-principal bound within it.
func TestPerPrincipalFollowsMaxConcurrent(t *testing.T) {
	for _, tc := range []struct{ max, set, want int }{{64, 0, 16}, {2, 0, 1}, {20, 0, 5}, {200, 0, 16}, {8, 3, 3}} {
		if got := (Admin{MaxConcurrent: tc.max, MaxConcurrentPerPrincipal: tc.set}).PerPrincipal(); got != tc.want {
			t.Errorf("maxConcurrentRequests %d, per principal %d: %d in force, want %d", tc.max, tc.set, got, tc.want)
		}
	}
}
