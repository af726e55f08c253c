package convert

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

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
	c.httpLimits()
}

// httpLimits: maxConcurrentHttpRequests and httpProxyTimeout, which bound the admin API's
// requests in Apache's proxy (Jetty's requests at once, the proxied exchange's time). A value
// equal to Apache's default is not written: pulsar-proxy's own defaults are tighter.
func (c *converter) httpLimits() {
	if v, inFile := c.get("maxConcurrentHttpRequests"); inFile {
		const to = "admin.maxConcurrentRequests"
		switch n, err := strconv.Atoi(v); {
		case err != nil || n < 1:
			c.dropped("maxConcurrentHttpRequests", fmt.Sprintf("%q: want a positive number; %s keeps its default, 64", v, to), true)
		case sameValue(v, apacheKeys["maxConcurrentHttpRequests"].def):
			c.mapped("maxConcurrentHttpRequests", to, "at Apache's default (1024), not written: pulsar-proxy's default, 64 proxied requests at once, holds (16 for one principal)", false)
		default:
			c.put(to, n, c.source("maxConcurrentHttpRequests"))
			c.mapped("maxConcurrentHttpRequests", to, "proxied admin, lookup and Functions requests at once (beyond them 429); /healthz, /readyz and /metrics are not counted", false)
		}
	}
	if v, inFile := c.get("httpProxyTimeout"); inFile {
		const to = "admin.requestTimeout"
		switch n, err := strconv.Atoi(v); {
		case err != nil || n < 1:
			c.dropped("httpProxyTimeout", fmt.Sprintf("%q: want a positive number of milliseconds; %s keeps its default, 10m", v, to), true)
		case sameValue(v, apacheKeys["httpProxyTimeout"].def):
			c.mapped("httpProxyTimeout", to, "at Apache's default (5m), not written: pulsar-proxy's default, 10m for a whole proxied request, holds", false)
		default:
			c.put(to, (time.Duration(n) * time.Millisecond).String(), c.source("httpProxyTimeout"))
			c.mapped("httpProxyTimeout", to, "the longest a whole proxied request may take, redirects and bodies included", false)
		}
	}
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
