// Package config holds every pulsar-proxy setting in one struct.
//
// Settings come from three layers, each overriding the one before it:
// built-in defaults, one YAML file, then PULSAR_PROXY_* environment
// variables. The result is validated as a whole, so an operator sees
// every mistake in one run instead of fixing them one restart at a time.
package config

import (
	"crypto/tls"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
)

// envPrefix starts every environment variable the proxy reads, so its
// settings cannot collide with anything else in a container's environment.
const envPrefix = "PULSAR_PROXY_"

// Config is the complete proxy configuration. yaml tags give the file
// spelling (and the key paths used in error messages); env tags give the
// environment variable name below envPrefix.
type Config struct {
	Listen    Listen    `yaml:"listen" envPrefix:"LISTEN_"`
	Discovery Discovery `yaml:"discovery" envPrefix:"DISCOVERY_"`
	Broker    Broker    `yaml:"broker" envPrefix:"BROKER_"`
	Session   Session   `yaml:"session" envPrefix:"SESSION_"`
	Log       Log       `yaml:"log" envPrefix:"LOG_"`
	Auth      Auth      `yaml:"auth" envPrefix:"AUTH_"`
	Authz     Authz     `yaml:"authz" envPrefix:"AUTHZ_"`

	TLS           TLS           `yaml:"tls" envPrefix:"TLS_"`
	ProxyProtocol ProxyProtocol `yaml:"proxyProtocol" envPrefix:"PROXY_PROTOCOL_"`

	Admin     Admin     `yaml:"admin" envPrefix:"ADMIN_"`
	SNI       SNI       `yaml:"sni" envPrefix:"SNI_"`
	WebSocket WebSocket `yaml:"websocket" envPrefix:"WEBSOCKET_"`

	implied []Implied // what Load derived from other settings (Implied)
}

// SNI is the SNI plane (listen.pulsarSNI): TLS relayed unread to the broker its ClientHello
// names, for clients with proxyServiceUrl and ProxyProtocol.SNI (docs/sni.md).
type SNI struct {
	// ServiceNames are server names that go to any live broker (the host of the cluster's
	// service URL, which clients send for their first lookup), besides the brokers' own.
	ServiceNames []string `yaml:"serviceNames" env:"SERVICE_NAMES"`
	// MaxClientHelloBytes is the largest ClientHello read; a larger one is refused.
	MaxClientHelloBytes int `yaml:"maxClientHelloBytes" env:"MAX_CLIENT_HELLO_BYTES"`
	// ProxyProtocol sends a PROXY header (off, v1, v2) ahead of the client's TLS, for
	// something on the brokers' TLS ports that reads it before TLS (Pulsar's brokers read
	// theirs inside TLS, so off for them).
	ProxyProtocol string `yaml:"proxyProtocol" env:"PROXY_PROTOCOL"`
}

// TLS is the certificate and policy of the client-facing TLS listener (listen.pulsarTLS).
type TLS struct {
	CertFile     string     `yaml:"certFile" env:"CERT_FILE"` // PEM; re-read when it changes on disk
	KeyFile      string     `yaml:"keyFile" env:"KEY_FILE"`
	MinVersion   TLSVersion `yaml:"minVersion" env:"MIN_VERSION"`     // 1.0, 1.1, 1.2 or 1.3
	CipherSuites []string   `yaml:"cipherSuites" env:"CIPHER_SUITES"` // Go names; empty = Go's defaults
	ClientCAFile string     `yaml:"clientCAFile" env:"CLIENT_CA_FILE"`
	ClientAuth   string     `yaml:"clientAuth" env:"CLIENT_AUTH"` // none, request, require
}

// ProxyProtocol is the PROXY protocol (v1/v2) on the client listeners.
type ProxyProtocol struct {
	Enabled       bool          `yaml:"enabled" env:"ENABLED"`
	TrustedCIDRs  Prefixes      `yaml:"trustedCIDRs" env:"TRUSTED_CIDRS"`
	RequireHeader bool          `yaml:"requireHeader" env:"REQUIRE_HEADER"`
	HeaderTimeout time.Duration `yaml:"headerTimeout" env:"HEADER_TIMEOUT"`
}

// Auth is who clients are (authentication at the proxy) and who the proxy is to brokers.
type Auth struct {
	Enabled                  bool          `yaml:"enabled" env:"ENABLED"`
	AnonymousRole            string        `yaml:"anonymousRole" env:"ANONYMOUS_ROLE"`
	Token                    AuthToken     `yaml:"token" envPrefix:"TOKEN_"`
	ClientCert               AuthTLS       `yaml:"tls" envPrefix:"TLS_"`
	Basic                    AuthBasic     `yaml:"basic" envPrefix:"BASIC_"`
	RefreshTimeout           time.Duration `yaml:"refreshTimeout" env:"REFRESH_TIMEOUT"`
	ForwardClientCredentials bool          `yaml:"forwardClientCredentials" env:"FORWARD_CLIENT_CREDENTIALS"`
	BrokerClient             BrokerClient  `yaml:"brokerClient" envPrefix:"BROKER_CLIENT_"`
}

// AuthToken validates clients' JWTs (auth method "token").
type AuthToken struct {
	SecretKeyFile string        `yaml:"secretKeyFile" env:"SECRET_KEY_FILE"` // HS256
	PublicKeyFile string        `yaml:"publicKeyFile" env:"PUBLIC_KEY_FILE"` // RS256 / ES256, PEM
	RoleClaim     string        `yaml:"roleClaim" env:"ROLE_CLAIM"`
	Leeway        time.Duration `yaml:"leeway" env:"LEEWAY"`
	Audience      string        `yaml:"audience" env:"AUDIENCE"`
	Issuers       []string      `yaml:"issuers" env:"ISSUERS"` // allowed iss; required with JWKSURL
	// JWKSURL is an identity provider's key set (OpenID Connect jwks_uri); it replaces
	// SecretKeyFile and PublicKeyFile.
	JWKSURL                string        `yaml:"jwksURL" env:"JWKS_URL"`
	JWKSRefreshInterval    time.Duration `yaml:"jwksRefreshInterval" env:"JWKS_REFRESH_INTERVAL"`
	JWKSMinRefetchInterval time.Duration `yaml:"jwksMinRefetchInterval" env:"JWKS_MIN_REFETCH_INTERVAL"`
	JWKSTimeout            time.Duration `yaml:"jwksTimeout" env:"JWKS_TIMEOUT"`
	JWKSCAFile             string        `yaml:"jwksCAFile" env:"JWKS_CA_FILE"`
}

// AuthBasic checks users' passwords (auth method "basic") against the credentials file
// Pulsar's AuthenticationProviderBasic reads.
type AuthBasic struct {
	CredentialsFile string        `yaml:"credentialsFile" env:"CREDENTIALS_FILE"` // user:hash lines, Apache MD5 ($apr1$)
	ReloadInterval  time.Duration `yaml:"reloadInterval" env:"RELOAD_INTERVAL"`
}

// AuthTLS names the role of a verified client certificate (auth method "tls").
type AuthTLS struct {
	RoleFrom  string `yaml:"roleFrom" env:"ROLE_FROM"`   // cn, san-dns or san-uri
	URIPrefix string `yaml:"uriPrefix" env:"URI_PREFIX"` // san-uri: required start, stripped
}

// BrokerClient is the proxy's own identity in its CONNECTs to brokers.
type BrokerClient struct {
	Token        string `yaml:"token" env:"TOKEN"`
	TokenFile    string `yaml:"tokenFile" env:"TOKEN_FILE"`
	OwnPrincipal string `yaml:"ownPrincipal" env:"OWN_PRINCIPAL"`
}

// Authz is the proxy's own topic-level authorization policy.
type Authz struct {
	Enabled        bool          `yaml:"enabled" env:"ENABLED"`
	PolicyFile     string        `yaml:"policyFile" env:"POLICY_FILE"`
	ReloadInterval time.Duration `yaml:"reloadInterval" env:"RELOAD_INTERVAL"`
}

// Listen holds the addresses the proxy accepts connections on.
type Listen struct {
	// Pulsar serves the Pulsar binary protocol in plaintext; empty = off, allowed only beside
	// PulsarTLS (a TLS-only proxy).
	Pulsar string `yaml:"pulsar" env:"PULSAR"`
	HTTP   string `yaml:"http" env:"HTTP"`   // health and metrics endpoints
	Pprof  string `yaml:"pprof" env:"PPROF"` // Go's /debug/pprof profiles; empty = off
	// PulsarTLS serves the same protocol over TLS (see TLS); empty = off.
	PulsarTLS string `yaml:"pulsarTLS" env:"PULSAR_TLS"`
	// PulsarSNI relays TLS unread to the broker its server name names (see SNI); empty = off.
	PulsarSNI string `yaml:"pulsarSNI" env:"PULSAR_SNI"`
	// Advertised are the listeners' URLs as clients reach them, which HTTP topic lookups
	// answer with (never a broker's); each "" is the host the client named in its lookup
	// request with the listener's port.
	Advertised Advertised `yaml:"advertised" envPrefix:"ADVERTISED_"`
}

// Advertised are the URLs of the proxy's listeners as clients reach them (behind a load
// balancer or a NAT, not the addresses bound).
type Advertised struct {
	Pulsar    string `yaml:"pulsar" env:"PULSAR"`        // pulsar://host:port of listen.pulsar
	PulsarTLS string `yaml:"pulsarTLS" env:"PULSAR_TLS"` // pulsar+ssl://host:port of listen.pulsarTLS
	HTTP      string `yaml:"http" env:"HTTP"`            // http://host:port of listen.http
	HTTPS     string `yaml:"https" env:"HTTPS"`          // https://host:port of admin.listenHTTPS
}

// Discovery says how the proxy finds brokers and how it keeps track of
// which ones are alive. At least one provider must be configured; several
// are used at once (the union of their lists).
type Discovery struct {
	Static              StaticDiscovery `yaml:"static" envPrefix:"STATIC_"`
	Consul              ConsulDiscovery `yaml:"consul" envPrefix:"CONSUL_"`
	DNS                 DNSDiscovery    `yaml:"dns" envPrefix:"DNS_"`
	MetadataStore       MetadataStore   `yaml:"metadataStore" envPrefix:"METADATA_STORE_"`
	HealthCheckInterval time.Duration   `yaml:"healthCheckInterval" env:"HEALTH_CHECK_INTERVAL"`
}

// StaticDiscovery is a fixed broker list.
type StaticDiscovery struct {
	Brokers []string `yaml:"brokers" env:"BROKERS"` // pulsar:// or pulsar+ssl:// URLs
	// WebBrokers are the same brokers' web service URLs (admin API), in the same order.
	WebBrokers []string `yaml:"webBrokers" env:"WEB_BROKERS"`
}

// ConsulDiscovery lists the passing instances of a Consul service; it is on
// when Service is set.
type ConsulDiscovery struct {
	Service    string        `yaml:"service" env:"SERVICE"`
	Tag        string        `yaml:"tag" env:"TAG"`
	Datacenter string        `yaml:"datacenter" env:"DATACENTER"`
	Address    string        `yaml:"address" env:"ADDRESS"`
	Token      string        `yaml:"token" env:"TOKEN"`
	WaitTime   time.Duration `yaml:"waitTime" env:"WAIT_TIME"`
}

// DNSDiscovery lists brokers from a DNS name's A/AAAA or SRV records; it is
// on when Name is set.
type DNSDiscovery struct {
	Name            string        `yaml:"name" env:"NAME"`
	Record          string        `yaml:"record" env:"RECORD"` // A (A and AAAA) or SRV
	Port            int           `yaml:"port" env:"PORT"`
	Server          string        `yaml:"server" env:"SERVER"`
	RefreshInterval time.Duration `yaml:"refreshInterval" env:"REFRESH_INTERVAL"`
	WebPort         int           `yaml:"webPort" env:"WEB_PORT"` // the brokers' web service port; 0 = none
}

// MetadataStore lists the brokers registered in Pulsar's own metadata store (ZooKeeper,
// /loadbalance/brokers); it is on when URL is set.
type MetadataStore struct {
	URL            string        `yaml:"url" env:"URL"` // [zk:]host:port[,host:port...][/chroot], as Pulsar's metadataStoreUrl
	SessionTimeout time.Duration `yaml:"sessionTimeout" env:"SESSION_TIMEOUT"`
	ListenerName   string        `yaml:"listenerName" env:"LISTENER_NAME"` // an advertised listener's URLs instead of the default ones
	Digest         string        `yaml:"digest" env:"DIGEST"`              // user:password, ZooKeeper's digest scheme
	DigestFile     string        `yaml:"digestFile" env:"DIGEST_FILE"`     // a file holding user:password
	TLS            StoreTLS      `yaml:"tls" envPrefix:"TLS_"`
}

// StoreTLS is how the proxy reaches ZooKeeper's secureClientPort.
type StoreTLS struct {
	Enabled                  bool   `yaml:"enabled" env:"ENABLED"`
	TrustCertsFile           string `yaml:"trustCertsFile" env:"TRUST_CERTS_FILE"` // PEM bundle; empty = the system's roots
	CertFile                 string `yaml:"certFile" env:"CERT_FILE"`              // client certificate for servers that require one
	KeyFile                  string `yaml:"keyFile" env:"KEY_FILE"`
	SkipHostnameVerification bool   `yaml:"skipHostnameVerification" env:"SKIP_HOSTNAME_VERIFICATION"`
}

// Broker bounds the proxy's own conversations with brokers, so a stuck
// broker costs a client a timeout rather than a hang.
type Broker struct {
	DialTimeout                time.Duration `yaml:"dialTimeout" env:"DIAL_TIMEOUT"`
	ConnectTimeout             time.Duration `yaml:"connectTimeout" env:"CONNECT_TIMEOUT"`
	LookupTimeout              time.Duration `yaml:"lookupTimeout" env:"LOOKUP_TIMEOUT"`
	MaxLookupRedirects         int           `yaml:"maxLookupRedirects" env:"MAX_LOOKUP_REDIRECTS"`
	LookupConnectionsPerBroker int           `yaml:"lookupConnectionsPerBroker" env:"LOOKUP_CONNECTIONS_PER_BROKER"`
	// The direct-mode target rule (see brokers.Set): only these ports,
	// discovery's brokers, URLs a broker named in a lookup answer for
	// LearnedTargetLifetime, and hosts matching AllowedHosts label by label
	// (a '*' never crosses a dot; see brokerhost.Match).
	AllowedPorts          []int         `yaml:"allowedPorts" env:"ALLOWED_PORTS"`
	AllowedHosts          []string      `yaml:"allowedHosts" env:"ALLOWED_HOSTS"`
	LearnedTargetLifetime time.Duration `yaml:"learnedTargetLifetime" env:"LEARNED_TARGET_LIFETIME"`
	// AllowedWebPorts are the only ports a broker's web service may be on: admin requests
	// carry the proxy's credentials, and a discovery entry names where they go (see the web
	// rule of brokers.Set). Empty allows none, never any: no broker web service is
	// used, and the admin API reaches only admin.functionWorkers.
	AllowedWebPorts []int `yaml:"allowedWebPorts" env:"ALLOWED_WEB_PORTS"`

	TLS BrokerTLS `yaml:"tls" envPrefix:"TLS_"`
	// ProxyProtocol sends a PROXY header (off, v1, v2) with each client's real address
	// on its broker connection, for brokers with haProxyProtocolEnabled.
	ProxyProtocol string `yaml:"proxyProtocol" env:"PROXY_PROTOCOL"`

	// Multiplex carries direct sessions of the same broker and principal over a few shared
	// broker connections (ids mapped, payloads untouched); at most MultiplexConnections per
	// broker and principal, each client's outbound queue bounded by MultiplexClientQueueBytes.
	Multiplex                 bool `yaml:"multiplex" env:"MULTIPLEX"`
	MultiplexConnections      int  `yaml:"multiplexConnections" env:"MULTIPLEX_CONNECTIONS"`
	MultiplexClientQueueBytes int  `yaml:"multiplexClientQueueBytes" env:"MULTIPLEX_CLIENT_QUEUE_BYTES"`
}

// BrokerTLS is how the proxy reaches brokers over TLS. When enabled, every broker is dialled
// over TLS (discovery names the brokers' TLS ports), whatever the client used.
type BrokerTLS struct {
	Enabled                  bool       `yaml:"enabled" env:"ENABLED"`
	TrustCertsFile           string     `yaml:"trustCertsFile" env:"TRUST_CERTS_FILE"` // PEM bundle; empty = the system's roots
	CertFile                 string     `yaml:"certFile" env:"CERT_FILE"`              // the proxy's client certificate, PEM; re-read when it changes
	KeyFile                  string     `yaml:"keyFile" env:"KEY_FILE"`
	MinVersion               TLSVersion `yaml:"minVersion" env:"MIN_VERSION"` // 1.2 or 1.3
	SkipHostnameVerification bool       `yaml:"skipHostnameVerification" env:"SKIP_HOSTNAME_VERIFICATION"`
}

// Session bounds what a single client connection may cost the proxy. MaxConnections,
// MaxConnectionsPerIP, ConnectionRatePerIP/BurstPerIP and IPv6PrefixLength hold on the HTTP
// listeners too (listen.http, admin.listenHTTPS), each of which counts its own connections
// (the two Pulsar listeners count theirs together): the same numbers per listener, so that a
// flood on one cannot use up another's, and an operator sets one per-IP number for a client.
type Session struct {
	HandshakeTimeout  time.Duration `yaml:"handshakeTimeout" env:"HANDSHAKE_TIMEOUT"`
	KeepAliveInterval time.Duration `yaml:"keepAliveInterval" env:"KEEP_ALIVE_INTERVAL"`
	MaxFrameSize      int           `yaml:"maxFrameSize" env:"MAX_FRAME_SIZE"`           // bytes
	MaxPendingLookups int           `yaml:"maxPendingLookups" env:"MAX_PENDING_LOOKUPS"` // per connection
	// Lookups being answered at once, all clients together; 0 = unbounded.
	MaxLookupsInFlight int `yaml:"maxLookupsInFlight" env:"MAX_LOOKUPS_IN_FLIGHT"`
	// A direct session stuck this long on a peer (part of a frame then nothing, or nothing
	// read of what was written to it) is closed; 0 = never.
	StallTimeout   time.Duration `yaml:"stallTimeout" env:"STALL_TIMEOUT"`
	MaxConnections int           `yaml:"maxConnections" env:"MAX_CONNECTIONS"` // 0 = unlimited
	DrainTimeout   time.Duration `yaml:"drainTimeout" env:"DRAIN_TIMEOUT"`
	// Per client IP: the PROXY header's where one was accepted; 0 = unlimited.
	MaxConnectionsPerIP int `yaml:"maxConnectionsPerIP" env:"MAX_CONNECTIONS_PER_IP"`
	// Passthrough forwards direct sessions without auth/authz socket to socket, unframed.
	Passthrough bool `yaml:"passthrough" env:"PASSTHROUGH"`
	// New connections per second per client IP (0 = unlimited), and the burst above it.
	ConnectionRatePerIP  float64 `yaml:"connectionRatePerIP" env:"CONNECTION_RATE_PER_IP"`
	ConnectionBurstPerIP int     `yaml:"connectionBurstPerIP" env:"CONNECTION_BURST_PER_IP"`
	// Both per-IP limits count an IPv6 client by this many leading bits of its address
	// (one client usually holds a whole /64); IPv4 clients by the whole address.
	IPv6PrefixLength int `yaml:"ipv6PrefixLength" env:"IPV6_PREFIX_LENGTH"`
	// DescriptorReserve is the file descriptors kept back from clients: client connections,
	// all listeners together, may use the open-files limit less this (two descriptors each,
	// for the broker connection a client may need); over it a connection is closed as it is
	// accepted.
	DescriptorReserve int `yaml:"descriptorReserve" env:"DESCRIPTOR_RESERVE"`
}

// Log controls logging. SessionSummary is separate from Level so the
// per-session line can be promoted to info without turning on all of debug.
type Log struct {
	Level          string `yaml:"level" env:"LEVEL"`                    // trace|debug|info|warn|error
	Format         string `yaml:"format" env:"FORMAT"`                  // json|console
	SessionSummary string `yaml:"sessionSummary" env:"SESSION_SUMMARY"` // debug|info|off
	// RefusalInterval is how often refused clients are summed up, per kind, in one line (the
	// first after a quiet interval is logged at once): see docs/logs.md.
	RefusalInterval time.Duration `yaml:"refusalInterval" env:"REFUSAL_INTERVAL"`
}

// defaults returns the configuration used for every setting that neither the
// file nor the environment sets. It has no discovery provider, so it does
// not validate on its own: a proxy must be told where its brokers are.
// defaultSession is the session section's defaults.
func defaultSession() Session {
	return Session{
		HandshakeTimeout:  10 * time.Second,
		KeepAliveInterval: 30 * time.Second,
		// The broker's default maxMessageSize is 5 MiB; the extra 10 KiB
		// leaves room for the frame's command and metadata around it.
		MaxFrameSize:         5*1024*1024 + 10*1024,
		MaxPendingLookups:    1000,
		MaxLookupsInFlight:   50000,
		StallTimeout:         60 * time.Second,
		MaxConnections:       0,
		DrainTimeout:         30 * time.Second,
		MaxConnectionsPerIP:  0,
		Passthrough:          true,
		ConnectionBurstPerIP: 20,
		IPv6PrefixLength:     64,
		DescriptorReserve:    1024,
	}
}

func defaults() *Config {
	return &Config{
		Listen: Listen{
			Pulsar: "0.0.0.0:6650",
			HTTP:   "0.0.0.0:8080",
		},
		TLS:           TLS{MinVersion: tls.VersionTLS12, ClientAuth: "none", CipherSuites: []string{}},
		ProxyProtocol: ProxyProtocol{HeaderTimeout: 5 * time.Second, TrustedCIDRs: Prefixes{}},
		Discovery: Discovery{
			Consul: ConsulDiscovery{
				WaitTime: 5 * time.Minute,
			},
			DNS: DNSDiscovery{
				Record:          "A",
				Port:            6650,
				RefreshInterval: 10 * time.Second,
				WebPort:         8080,
			},
			MetadataStore:       MetadataStore{SessionTimeout: 30 * time.Second},
			HealthCheckInterval: 5 * time.Second,
		},
		Broker: Broker{
			DialTimeout:                5 * time.Second,
			ConnectTimeout:             10 * time.Second,
			LookupTimeout:              30 * time.Second,
			MaxLookupRedirects:         8,
			LookupConnectionsPerBroker: 1,
			AllowedPorts:               []int{6650, 6651},
			AllowedWebPorts:            []int{8080, 8443}, // Pulsar's webServicePort and webServicePortTls
			LearnedTargetLifetime:      10 * time.Minute,
			TLS:                        BrokerTLS{MinVersion: tls.VersionTLS12},
			ProxyProtocol:              "off",
			MultiplexConnections:       4,
			MultiplexClientQueueBytes:  32 << 20,
		},
		Session: defaultSession(),
		Log: Log{
			Level:           "info",
			Format:          "json",
			SessionSummary:  "debug",
			RefusalInterval: 10 * time.Second,
		},
		Auth: Auth{
			Token: AuthToken{RoleClaim: "sub", Leeway: 5 * time.Second, Issuers: []string{},
				JWKSRefreshInterval: 5 * time.Minute, JWKSMinRefetchInterval: 10 * time.Second, JWKSTimeout: 5 * time.Second},
			ClientCert:     AuthTLS{RoleFrom: "cn"},
			Basic:          AuthBasic{ReloadInterval: 2 * time.Second},
			RefreshTimeout: 30 * time.Second,
			BrokerClient:   BrokerClient{OwnPrincipal: "pulsar-proxy"},
		},
		Authz:     Authz{ReloadInterval: 2 * time.Second},
		Admin:     adminDefaults(),
		WebSocket: webSocketDefaults(),
		SNI:       SNI{ServiceNames: []string{}, MaxClientHelloBytes: 16 << 10, ProxyProtocol: "off"},
	}
}

// Load builds the configuration from defaults, the YAML file at path (skipped
// when path is ""), and environ (os.Environ() in production; tests pass their
// own so they never depend on or modify the process environment), then
// validates it.
func Load(path string, environ []string) (*Config, error) {
	cfg := defaults()
	set := map[string]bool{} // the settings the file or the environment gives a value
	var fileErr error
	if path != "" {
		fileErr = cfg.loadFile(path, set)
	}
	// Both are reported at once: a misspelt variable beside a misspelt key is one run, not two.
	if err := errors.Join(fileErr, cfg.loadEnv(environ, set)); err != nil {
		return nil, err
	}
	cfg.derive(set)
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("invalid configuration:\n%w", err)
	}
	return cfg, nil
}

// setting is one field of Config as the outside world spells it.
type setting struct {
	path  string // yaml key path, e.g. "broker.dialTimeout"
	env   string // full variable name; "" for sections
	field reflect.StructField
	index []int // the field's place in Config (reflect.Value.FieldByIndex)
}

// walk visits every section and setting of Config, parents first, deriving
// names from the struct tags so messages and tests cannot drift from them.
func walk(visit func(setting)) {
	var rec func(t reflect.Type, path, envPrefix string, at []int)
	rec = func(t reflect.Type, path, envPrefix string, at []int) {
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue // what Load derives (implied), not a setting
			}
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			p := name
			if path != "" {
				p = path + "." + name
			}
			index := append(slices.Clone(at), i)
			if f.Type.Kind() == reflect.Struct {
				visit(setting{path: p, field: f, index: index})
				rec(f.Type, p, envPrefix+f.Tag.Get("envPrefix"), index)
				continue
			}
			visit(setting{path: p, env: envPrefix + f.Tag.Get("env"), field: f, index: index})
		}
	}
	rec(reflect.TypeFor[Config](), "", envPrefix, nil)
}
