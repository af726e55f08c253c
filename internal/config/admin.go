package config

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/internal/brokerhost"
)

// Admin is the HTTP plane's reverse proxy: Pulsar's admin REST API, topic lookups over HTTP
// and the Functions worker API, served on listen.http (and on ListenHTTPS) beside /healthz,
// /readyz and /metrics. Field names carry the section's name: env errors are mapped back by
// Go field name, which must be unique in Config.
type Admin struct {
	Enabled bool `yaml:"enabled" env:"ENABLED"`
	// ListenHTTPS serves the whole HTTP plane over TLS too, with the certificate of
	// tls.certFile/keyFile (reloaded as for listen.pulsarTLS) and tls.clientCAFile/clientAuth
	// for client certificates; "" = off.
	ListenHTTPS string `yaml:"listenHTTPS" env:"LISTEN_HTTPS"`
	// FunctionWorkers are the Functions workers' web service URLs; empty sends the worker
	// API to the brokers (functionsWorkerEnabled).
	FunctionWorkers []string `yaml:"functionWorkers" env:"FUNCTION_WORKERS"`
	MaxConcurrent   int      `yaml:"maxConcurrentRequests" env:"MAX_CONCURRENT_REQUESTS"`
	// MaxConcurrentPerPrincipal bounds one principal's requests at once (an
	// authenticated role's; a client address's without one), so that one cannot keep the
	// others at 429. 0 (the default): a quarter of maxConcurrentRequests, at least 1, at most 16,
	// so that lowering maxConcurrentRequests alone keeps the two consistent.
	MaxConcurrentPerPrincipal int   `yaml:"maxConcurrentRequestsPerPrincipal" env:"MAX_CONCURRENT_REQUESTS_PER_PRINCIPAL"`
	MaxBodySize               int64 `yaml:"maxRequestBodySize" env:"MAX_REQUEST_BODY_SIZE"`
	// MaxSpooledBytes bounds the request bodies kept on disk for redirects, all requests
	// together (the temporary directory is a bounded volume: the chart's /tmp emptyDir).
	MaxSpooledBytes int64         `yaml:"maxSpooledBytes" env:"MAX_SPOOLED_BYTES"`
	MaxRedirects    int           `yaml:"maxRedirects" env:"MAX_REDIRECTS"`
	ReadTimeout     time.Duration `yaml:"readTimeout" env:"READ_TIMEOUT"`
	// MinBodyRate is the slowest a request body may arrive on average (bytes a second)
	// once MinBodyRateGrace of waiting for it has passed; 0 = no floor.
	MinBodyRate      int           `yaml:"minBodyRate" env:"MIN_BODY_RATE"`
	MinBodyRateGrace time.Duration `yaml:"minBodyRateGrace" env:"MIN_BODY_RATE_GRACE"`
	ResponseTimeout  time.Duration `yaml:"responseTimeout" env:"RESPONSE_TIMEOUT"`
	RequestTimeout   time.Duration `yaml:"requestTimeout" env:"REQUEST_TIMEOUT"`
	AccessLog        string        `yaml:"accessLog" env:"ACCESS_LOG"` // info, debug or off
}

func adminDefaults() Admin {
	return Admin{
		Enabled:                   true,
		MaxConcurrent:             64,
		MaxConcurrentPerPrincipal: 0,
		MaxBodySize:               256 << 20,
		MaxSpooledBytes:           1 << 30,
		MaxRedirects:              8,
		ReadTimeout:               30 * time.Second,
		MinBodyRate:               1024,
		MinBodyRateGrace:          10 * time.Second,
		ResponseTimeout:           2 * time.Minute,
		RequestTimeout:            10 * time.Minute,
		AccessLog:                 "info",
	}
}

func (c *Config) validateAdmin(p *problems) {
	a := c.Admin
	if a.MaxConcurrent < 1 {
		p.bad("admin.maxConcurrentRequests", "must be at least 1, got %d", a.MaxConcurrent)
	}
	if a.MaxConcurrentPerPrincipal < 0 || a.MaxConcurrentPerPrincipal > max(a.MaxConcurrent, 1) {
		p.bad("admin.maxConcurrentRequestsPerPrincipal", "must be between 0 (a quarter of admin.maxConcurrentRequests, at most 16) and admin.maxConcurrentRequests (%d), got %d", a.MaxConcurrent, a.MaxConcurrentPerPrincipal)
	}
	p.atLeastZero("admin.minBodyRate", a.MinBodyRate, "no floor")
	p.positive("admin.minBodyRateGrace", a.MinBodyRateGrace)
	if a.MaxBodySize < 1<<10 {
		p.bad("admin.maxRequestBodySize", "must be at least 1024 bytes, got %d", a.MaxBodySize)
	}
	if a.MaxSpooledBytes < a.MaxBodySize {
		p.bad("admin.maxSpooledBytes", "must be at least admin.maxRequestBodySize (%d), so that the largest body allowed can be kept, got %d", a.MaxBodySize, a.MaxSpooledBytes)
	}
	p.between("admin.maxRedirects", a.MaxRedirects, 1, 32)
	p.positive("admin.readTimeout", a.ReadTimeout)
	p.positive("admin.responseTimeout", a.ResponseTimeout)
	p.positive("admin.requestTimeout", a.RequestTimeout)
	p.oneOf("admin.accessLog", a.AccessLog, "info", "debug", "off")
	c.checkWebURLs(p, "admin.functionWorkers", a.FunctionWorkers)
	if a.ListenHTTPS != "" {
		p.listenAddr("admin.listenHTTPS", a.ListenHTTPS)
		l := c.Listen
		anyPort := strings.HasSuffix(a.ListenHTTPS, ":0")
		if !anyPort && slices.Contains([]string{l.HTTP, l.Pulsar, l.PulsarTLS}, a.ListenHTTPS) {
			p.bad("admin.listenHTTPS", "%q is already the address of another listener", a.ListenHTTPS)
		}
		if c.TLS.CertFile == "" || c.TLS.KeyFile == "" {
			p.bad("admin.listenHTTPS", "needs tls.certFile and tls.keyFile (the certificate it serves)")
		}
	}
	ws := c.Discovery.Static.WebBrokers
	if len(ws) > 0 && len(ws) != len(c.Discovery.Static.Brokers) {
		p.bad("discovery.static.webBrokers", "%d web service URLs for %d brokers: give one for each broker of discovery.static.brokers, in the same order", len(ws), len(c.Discovery.Static.Brokers))
	}
	c.checkWebURLs(p, "discovery.static.webBrokers", ws)
	c.checkWebPorts(p, ws)
	p.between("discovery.dns.webPort", c.Discovery.DNS.WebPort, 0, 65535)
}

// checkWebPorts holds the brokers' web services that configuration names to
// broker.allowedWebPorts, as the live set does at run time: a file that names another port
// is refused at load rather than losing its admin API with a warning.
func (c *Config) checkWebPorts(p *problems, webBrokers []string) {
	allowed := c.Broker.AllowedWebPorts
	for i, u := range webBrokers {
		if _, _, port, err := brokerhost.ParseWebURL(u); err == nil {
			if n, _ := strconv.Atoi(port); !slices.Contains(allowed, n) {
				p.bad(fmt.Sprintf("discovery.static.webBrokers[%d]", i), "%q: port %d is not in broker.allowedWebPorts %v", u, n, allowed)
			}
		}
	}
	if dns := c.Discovery.DNS; dns.Name != "" && dns.WebPort != 0 && !slices.Contains(allowed, dns.WebPort) {
		p.bad("discovery.dns.webPort", "%d is not in broker.allowedWebPorts %v (0: the brokers' web services are not used)", dns.WebPort, allowed)
	}
}

// checkWebURLs checks web service URLs: http(s)://host:port, each once, https exactly when
// broker.tls.enabled (one switch decides how brokers are reached, as for broker URLs).
func (c *Config) checkWebURLs(p *problems, key string, urls []string) {
	seen := map[string]int{}
	for i, u := range urls {
		k := fmt.Sprintf("%s[%d]", key, i)
		tls, host, port, err := brokerhost.ParseWebURL(u)
		if err != nil {
			p.bad(k, "%q: %v", u, err)
			continue
		}
		if j, dup := seen[host+":"+port]; dup {
			p.bad(k, "%q is listed twice (also [%d])", u, j)
		}
		seen[host+":"+port] = i
		if tls != c.Broker.TLS.Enabled {
			p.bad(k, "%q: https:// URLs go with broker.tls.enabled: true, http:// with false", u)
		}
	}
}

// PerPrincipal is admin.maxConcurrentRequestsPerPrincipal in force: the setting, or for 0 a
// quarter of maxConcurrentRequests, at least 1, at most 16.
func (a Admin) PerPrincipal() int {
	if a.MaxConcurrentPerPrincipal > 0 {
		return a.MaxConcurrentPerPrincipal
	}
	return min(max(a.MaxConcurrent/4, 1), 16)
}
