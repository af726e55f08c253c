package discovery

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	consul "github.com/hashicorp/consul/api"
	"github.com/rs/zerolog"

	"github.com/pulsar-proxy/pulsar-proxy/brokers"
	"github.com/pulsar-proxy/pulsar-proxy/internal/brokerhost"
)

// ConsulConfig says which Consul service lists the brokers.
type ConsulConfig struct {
	Service    string // required
	Tag        string // only instances with this tag; "" for all
	Datacenter string // "" for the agent's own
	Address    string // agent address (host:port or http[s]://host:port); "" uses CONSUL_HTTP_ADDR, then 127.0.0.1:8500
	Token      string // ACL token; "" uses CONSUL_HTTP_TOKEN
	// WaitTime is how long one blocking query may wait for a change (Consul caps it at 10m).
	WaitTime time.Duration
	// WebTLS makes the brokers' web service URLs https:// (see webPortMeta).
	WebTLS bool
	// retryMin and retryMax bound the backoff after a failed query.
	retryMin, retryMax time.Duration
}

// pulsarPortMeta is the service-meta key that, when set, gives the broker's binary-protocol
// port instead of the service port (for services registered on the broker's HTTP port).
const pulsarPortMeta = "pulsar_port"

// webPortMeta is the service-meta key that gives the broker's web service port (admin REST
// API) for services registered on the binary port. A service registered on the web port (with
// pulsar_port) has the service port as its web port.
const webPortMeta = "web_port"

// Consul lists the passing instances of a Consul service as brokers. It follows the catalog
// with blocking queries, so a change is seen within one round trip and an idle cluster costs
// one open request per WaitTime.
//
// The broker URL of an instance is pulsar://<address>:<port>, where address is the service's
// address, or its node's address when the service has none, and port is the service meta
// value pulsar_port when present, else the service port. Instances whose address or port is
// not usable are skipped with a warning. The broker's web service is on the service meta value
// web_port, else on the service port when pulsar_port is set (the service is registered on the
// web port); else it is unknown and the broker serves no admin requests through the proxy.
type Consul struct {
	*source
	cfg    ConsulConfig
	health *consul.Health
}

// NewConsul builds the provider; nothing is asked until Run.
func NewConsul(cfg ConsulConfig, log zerolog.Logger, m *Metrics) (*Consul, error) {
	if cfg.Service == "" {
		return nil, fmt.Errorf("consul discovery needs a service name")
	}
	if cfg.WaitTime <= 0 {
		cfg.WaitTime = 5 * time.Minute
	}
	if cfg.retryMin <= 0 {
		cfg.retryMin = 500 * time.Millisecond
	}
	if cfg.retryMax < cfg.retryMin {
		cfg.retryMax = max(10*time.Second, cfg.retryMin)
	}
	cc := consul.DefaultConfig() // reads CONSUL_HTTP_ADDR, CONSUL_HTTP_TOKEN, CONSUL_CACERT, ...
	if cfg.Address != "" {
		cc.Address = cfg.Address
	}
	if cfg.Token != "" {
		cc.Token = cfg.Token
	}
	if cfg.Datacenter != "" {
		cc.Datacenter = cfg.Datacenter
	}
	hc, err := consul.NewHttpClient(cc.Transport, cc.TLSConfig)
	if err != nil {
		return nil, fmt.Errorf("consul client: %w", err)
	}
	// Consul adds up to WaitTime/16 of jitter; beyond that a request is hung (an agent that
	// stopped answering without closing), and only a client timeout notices.
	hc.Timeout = cfg.WaitTime + cfg.WaitTime/16 + 10*time.Second
	cc.HttpClient = hc
	client, err := consul.NewClient(cc)
	if err != nil {
		return nil, fmt.Errorf("consul client: %w", err)
	}
	return &Consul{source: newSource("consul", log, m), cfg: cfg, health: client.Health()}, nil
}

// Run follows the service until ctx ends.
func (c *Consul) Run(ctx context.Context) {
	var index uint64
	retry := backoff{min: c.cfg.retryMin, max: c.cfg.retryMax}
	for ctx.Err() == nil {
		opts := (&consul.QueryOptions{WaitIndex: index, WaitTime: c.cfg.WaitTime}).WithContext(ctx)
		entries, meta, err := c.health.Service(c.cfg.Service, c.cfg.Tag, true, opts)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			c.confirm() // the watch held until it broke just now
			c.fail(fmt.Errorf("query service %q: %w", c.cfg.Service, err))
			index = 0
			if !sleep(ctx, retry.next()) {
				return
			}
			continue
		}
		retry.reset()
		if meta.LastIndex != index || index == 0 || c.isStale() {
			c.succeed(c.brokersOf(entries))
		} else {
			c.confirm() // the wait ran out without a change
		}
		index = meta.LastIndex
		if index < 1 {
			index = 1 // Consul's advice: never block on 0 (it would not block), and reset after going backwards
		}
		// A cluster with churning checks can move the index many times a second; this keeps
		// the proxy from turning into the tight loop blocking queries exist to avoid.
		if !sleep(ctx, 100*time.Millisecond) {
			return
		}
	}
}

func (c *Consul) brokersOf(entries []*consul.ServiceEntry) []brokers.Broker {
	var out []brokers.Broker
	for _, e := range entries {
		b, err := consulBroker(e, c.cfg.WebTLS)
		if err != nil {
			c.log.Warn().Err(err).Msg("skipping a Consul instance that does not name a usable broker")
			continue
		}
		out = append(out, b)
	}
	return out
}

func consulBroker(e *consul.ServiceEntry, webTLS bool) (brokers.Broker, error) {
	if e.Service == nil {
		return brokers.Broker{}, fmt.Errorf("instance without service")
	}
	id := e.Service.ID
	host := e.Service.Address
	if host == "" && e.Node != nil {
		host = e.Node.Address
	}
	port, webPort := e.Service.Port, 0
	if p, ok := e.Service.Meta[pulsarPortMeta]; ok {
		n, err := strconv.Atoi(p)
		if err != nil {
			return brokers.Broker{}, fmt.Errorf("instance %s: meta %s=%q is not a port", id, pulsarPortMeta, p)
		}
		port, webPort = n, e.Service.Port
	}
	if p, ok := e.Service.Meta[webPortMeta]; ok {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return brokers.Broker{}, fmt.Errorf("instance %s: meta %s=%q is not a port", id, webPortMeta, p)
		}
		webPort = n
	}
	if port < 1 || port > 65535 {
		return brokers.Broker{}, fmt.Errorf("instance %s: port %d out of range", id, port)
	}
	if err := brokerhost.CheckHost(host); err != nil {
		return brokers.Broker{}, fmt.Errorf("instance %s: address is not a host name or IP: %v", id, err)
	}
	b, err := brokers.ParseURL("pulsar://" + net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return brokers.Broker{}, fmt.Errorf("instance %s: %w", id, err)
	}
	if webPort != 0 {
		b.Web = brokers.WebURL(webTLS, b.Host, strconv.Itoa(webPort))
	}
	return b, nil
}
