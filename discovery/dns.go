package discovery

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/miekg/dns"
	"github.com/rs/zerolog"

	"github.com/pulsar-proxy/pulsar-proxy/brokers"
	"github.com/pulsar-proxy/pulsar-proxy/internal/brokerhost"
)

// DNSConfig says which DNS name lists the brokers.
type DNSConfig struct {
	// Name is a fully qualified name, e.g. the headless Service
	// pulsar-broker-headless.pulsar.svc.cluster.local (no search domains are applied).
	Name string
	// SRV queries SRV records of Name (e.g. _pulsar._tcp.pulsar-broker-headless.pulsar.svc.cluster.local):
	// each record's target host and port is a broker. Otherwise Name's A and AAAA records
	// are the brokers, all on Port.
	SRV  bool
	Port int
	// WebPort is the brokers' web service port (admin REST API) on the same hosts; 0 leaves
	// it unknown. WebTLS makes those URLs https://.
	WebPort int
	WebTLS  bool
	// Server is the DNS server (host:port); "" uses the first nameserver of /etc/resolv.conf.
	Server string
	// Interval is the longest time between refreshes; a record TTL that is shorter wins,
	// but never below minInterval.
	Interval, minInterval time.Duration
	Timeout               time.Duration // one query
}

// DNS lists brokers from A/AAAA or SRV records, refreshed on an interval and when the
// records' TTL runs out, whichever is first.
type DNS struct {
	*source
	cfg  DNSConfig
	name string // fully qualified
}

// NewDNS builds the provider; nothing is asked until Run.
func NewDNS(cfg DNSConfig, log zerolog.Logger, m *Metrics) (*DNS, error) {
	name := strings.TrimSuffix(cfg.Name, ".")
	if _, ok := dns.IsDomainName(name); !ok || !validQueryName(name) || net.ParseIP(name) != nil {
		return nil, fmt.Errorf("dns discovery: %q is not a DNS name", cfg.Name)
	}
	if !cfg.SRV && (cfg.Port < 1 || cfg.Port > 65535) {
		return nil, fmt.Errorf("dns discovery: port %d out of range", cfg.Port)
	}
	if cfg.Server == "" {
		rc, err := dns.ClientConfigFromFile("/etc/resolv.conf")
		if err != nil || len(rc.Servers) == 0 {
			return nil, fmt.Errorf("dns discovery: no server configured and none in /etc/resolv.conf: %v", err)
		}
		cfg.Server = net.JoinHostPort(rc.Servers[0], rc.Port)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 10 * time.Second
	}
	if cfg.minInterval <= 0 {
		cfg.minInterval = time.Second
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	return &DNS{source: newSource("dns", log, m), cfg: cfg, name: dns.Fqdn(strings.ToLower(name))}, nil
}

// Run refreshes until ctx ends.
func (d *DNS) Run(ctx context.Context) {
	retry := backoff{min: min(500*time.Millisecond, d.cfg.Interval), max: d.cfg.Interval}
	for {
		found, ttl, err := d.resolve(ctx)
		wait := d.cfg.Interval
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			d.fail(err)
			wait = retry.next()
		} else {
			retry.reset()
			d.succeed(found)
			if len(found) == 0 {
				wait = retry.next()
			} else if ttl > 0 && ttl < wait {
				wait = max(ttl, d.cfg.minInterval)
			}
		}
		if !sleep(ctx, wait) {
			return
		}
	}
}

// resolve asks for the records once; ttl is the smallest TTL among them (0 if none).
func (d *DNS) resolve(ctx context.Context) ([]brokers.Broker, time.Duration, error) {
	if d.cfg.SRV {
		rrs, err := d.query(ctx, dns.TypeSRV)
		if err != nil {
			return nil, 0, err
		}
		var out []brokers.Broker
		var ttl uint32
		for _, rr := range rrs {
			srv, ok := rr.(*dns.SRV)
			if !ok {
				continue
			}
			ttl = minTTL(ttl, srv.Hdr.Ttl)
			host := strings.ToLower(strings.TrimSuffix(srv.Target, "."))
			if brokerhost.CheckHost(host) != nil || srv.Port == 0 {
				d.log.Warn().Str("target", srv.Target).Uint16("port", srv.Port).Msg("skipping an SRV record that does not name a usable broker")
				continue
			}
			b, err := brokers.ParseURL("pulsar://" + net.JoinHostPort(host, strconv.Itoa(int(srv.Port))))
			if err != nil {
				d.log.Warn().Err(err).Msg("skipping an SRV record")
				continue
			}
			out = append(out, d.withWeb(b))
		}
		return out, time.Duration(ttl) * time.Second, nil
	}
	var out []brokers.Broker
	var ttl uint32
	port := strconv.Itoa(d.cfg.Port)
	for _, qtype := range []uint16{dns.TypeA, dns.TypeAAAA} {
		rrs, err := d.query(ctx, qtype)
		if err != nil {
			return nil, 0, err
		}
		for _, rr := range rrs {
			var ip net.IP
			switch r := rr.(type) {
			case *dns.A:
				ip = r.A
			case *dns.AAAA:
				ip = r.AAAA
			default:
				continue // a CNAME on the way
			}
			ttl = minTTL(ttl, rr.Header().Ttl)
			out = append(out, d.withWeb(brokers.Broker{URL: "pulsar://" + net.JoinHostPort(ip.String(), port), Host: ip.String(), Port: port}))
		}
	}
	return out, time.Duration(ttl) * time.Second, nil
}

// withWeb sets the broker's web service URL: the same host on WebPort.
func (d *DNS) withWeb(b brokers.Broker) brokers.Broker {
	if d.cfg.WebPort > 0 {
		b.Web = brokers.WebURL(d.cfg.WebTLS, b.Host, strconv.Itoa(d.cfg.WebPort))
	}
	return b
}

func minTTL(a, b uint32) uint32 {
	if a == 0 || b < a {
		return b
	}
	return a
}

var errNXDomain = errors.New("name does not exist (NXDOMAIN)")

// query sends one question over UDP, and again over TCP if the answer was truncated.
// NXDOMAIN is an error (the last good list is kept); an empty answer is not.
func (d *DNS) query(ctx context.Context, qtype uint16) ([]dns.RR, error) {
	msg := new(dns.Msg)
	msg.SetQuestion(d.name, qtype)
	msg.RecursionDesired = true
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	c := &dns.Client{Net: "udp", Timeout: d.cfg.Timeout}
	resp, _, err := c.ExchangeContext(ctx, msg, d.cfg.Server)
	if err == nil && resp.Truncated {
		c.Net = "tcp"
		resp, _, err = c.ExchangeContext(ctx, msg, d.cfg.Server)
	}
	qname := dns.TypeToString[qtype] + " " + d.name
	if err != nil {
		return nil, fmt.Errorf("%s at %s: %w", qname, d.cfg.Server, err)
	}
	switch resp.Rcode {
	case dns.RcodeSuccess:
		return resp.Answer, nil
	case dns.RcodeNameError:
		return nil, fmt.Errorf("%s: %w", qname, errNXDomain)
	default:
		return nil, fmt.Errorf("%s at %s: %s", qname, d.cfg.Server, dns.RcodeToString[resp.Rcode])
	}
}

// validQueryName accepts a name to query: host-name labels that may also hold '_', since SRV
// names start with _service._proto. The brokers it lists are checked as hosts (brokerhost).
func validQueryName(h string) bool {
	if len(h) == 0 || len(h) > 253 {
		return false
	}
	for label := range strings.SplitSeq(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}
