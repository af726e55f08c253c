package convert

import (
	"fmt"
	"net"
	"strings"

	"github.com/pulsar-proxy/pulsar-proxy/internal/brokerhost"
)

// httpPlane: where the admin API goes (the brokers' and the Functions workers' web
// services) and its HTTPS listener. Apache's proxy picks the TLS URLs by tlsEnabledWithBroker,
// as pulsar-proxy picks https by broker.tls.enabled.
func (c *converter) httpPlane() {
	tlsOn := c.bool("tlsEnabledWithBroker")
	brokers, _ := c.out.get("discovery.static.brokers").([]string)
	c.webURLs("brokerWebServiceURL", "discovery.static.webBrokers", tlsOn, func(urls []string) string {
		if len(urls) != len(brokers) {
			return fmt.Sprintf("%d web service URLs for %d broker URLs: discovery.static.webBrokers needs one for each broker, in the same order", len(urls), len(brokers))
		}
		return ""
	})
	c.webURLs("functionWorkerWebServiceURL", "admin.functionWorkers", tlsOn, func([]string) string { return "" })
	c.httpsListener()
}

// webURLs maps key (or key+"TLS" with broker TLS on) to the web service URLs at path; check
// says why the URLs cannot be used there ("" when they can).
func (c *converter) webURLs(key, path string, tlsOn bool, check func([]string) string) {
	used, other := key, key+"TLS"
	if tlsOn {
		used, other = other, used
	}
	if c.setInFile(other) {
		c.dropped(other, fmt.Sprintf("not used: with tlsEnabledWithBroker=%t pulsar-proxy reaches web services as %s names them (broker.tls.enabled decides http or https)", tlsOn, used), false)
	}
	raw, inFile := c.get(used)
	if !inFile {
		return
	}
	urls, err := splitWebURLs(raw, tlsOn)
	if err == nil {
		if why := check(urls); why != "" {
			err = fmt.Errorf("%s", why)
		}
	}
	if err != nil {
		c.dropped(used, err.Error()+"; set "+path+" yourself", true)
		return
	}
	c.put(path, urls, c.source(used))
	c.mapped(used, path, "the admin API on listen.http sends requests there and follows their redirects inside the live broker set", false)
}

// splitWebURLs splits a web service URL (one scheme, one or several hosts) into URLs.
func splitWebURLs(raw string, tlsOn bool) ([]string, error) {
	scheme, hosts, ok := strings.Cut(strings.TrimSpace(raw), "://")
	want := map[bool]string{false: "http", true: "https"}[tlsOn]
	if !ok || scheme != want {
		return nil, fmt.Errorf("%q: want an %s:// URL (tlsEnabledWithBroker=%t)", raw, want, tlsOn)
	}
	var out []string
	for _, h := range strings.Split(strings.TrimSuffix(hosts, "/"), ",") {
		if h = strings.TrimSpace(h); h == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(strings.Trim(h, "[]"), map[bool]string{false: "80", true: "443"}[tlsOn])
		}
		u := scheme + "://" + h
		if _, _, _, err := brokerhost.ParseWebURL(u); err != nil {
			return nil, fmt.Errorf("%q: %v", u, err)
		}
		out = append(out, u)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%q names no host", raw)
	}
	return out, nil
}

// httpsListener: webServicePortTls becomes admin.listenHTTPS, served with the client
// listener's certificate (tlsCertificateFilePath and tlsKeyFilePath).
func (c *converter) httpsListener() {
	port, inFile := c.get("webServicePortTls")
	if !inFile {
		return
	}
	if !c.setInFile("tlsCertificateFilePath") || !c.setInFile("tlsKeyFilePath") {
		c.dropped("webServicePortTls", "no TLS certificate: admin.listenHTTPS serves tls.certFile and tls.keyFile (tlsCertificateFilePath, tlsKeyFilePath), which the file does not set", true)
		return
	}
	bind, _ := c.get("bindAddress")
	c.put("admin.listenHTTPS", hostPort(bind, port), c.source("bindAddress", "webServicePortTls"))
	c.mapped("webServicePortTls", "admin.listenHTTPS", "the admin API, /healthz, /readyz and /metrics over TLS with the client listener's certificate and client-certificate settings", false)
}
