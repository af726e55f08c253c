// Package convert is `pulsar-proxy convert-config`: it reads an Apache Pulsar proxy's
// proxy.conf and writes the pulsar-proxy config.yaml that does the same, with a report of
// every setting it could not carry over and why. Nothing is dropped silently: every key of
// the file is either mapped (named in a comment beside the key it became) or reported.
package convert

import (
	"bytes"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/internal/app/checkconfig"
	"github.com/pulsar-proxy/pulsar-proxy/internal/brokerhost"
	"github.com/pulsar-proxy/pulsar-proxy/internal/zkaddr"
)

// Note is one line of the report: what became of a setting of the file.
type Note struct {
	Key, Value string
	Line       int    // where the file sets it; 0 for Apache's default
	To         string // the pulsar-proxy keys it became; "" when not carried over
	Reason     string // why it is not carried over, or what to know about how it was
	// Review: the setting changes behaviour and could not be carried over as it is, or needs
	// the operator's hand (a file to convert, a key to add).
	Review bool
}

// Result is a conversion.
type Result struct {
	YAML  []byte // the config.yaml
	Notes []Note
	// Problems are why the config.yaml is not ready as written: what the conversion could not
	// do (with the fix), then what check-config refuses in it, in check-config's words (the
	// configuration does not load, or a file it names is missing or not what the proxy
	// reads). Empty when check-config passes it here.
	Problems []string
	// Warnings are check-config's warnings about the written file.
	Warnings []string
	// Written are the files the conversion wrote beside the config.yaml (converted keys).
	Written []string
}

// Valid reports whether check-config passes the written configuration (where the conversion
// ran: the files it names are read there).
func (r *Result) Valid() bool { return len(r.Problems) == 0 }

// Options of a conversion.
type Options struct {
	// WriteDir is where the conversion may write the files it converts (a DER token key as
	// PEM, an inline key): the -o FILE's directory. Empty: nothing is written, and a key that
	// needs converting is a problem.
	WriteDir string
}

// Convert reads proxy.conf from in and converts it (name is for messages), writing nothing.
func Convert(in io.Reader, name string) (*Result, error) {
	return ConvertWith(in, name, Options{})
}

// ConvertWith reads proxy.conf from in and converts it with opts.
func ConvertWith(in io.Reader, name string, opts Options) (*Result, error) {
	props, dups, err := readProperties(in)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	c := &converter{set: map[string]property{}, out: &tree{}, opts: opts}
	for _, p := range props {
		c.set[p.Key] = p
	}
	for _, d := range dups {
		c.notes = append(c.notes, Note{Key: d.Key, Value: d.Value, Line: d.Line, Reason: "set again later in the file; the last value counts, as in Pulsar"})
	}
	c.convert()
	c.unmapped()

	res := &Result{Notes: c.notes, Written: c.written}
	res.YAML = c.out.render(name)
	problems, warnings := validate(res.YAML)
	res.Problems = append(c.problems, problems...)
	res.Warnings = warnings
	return res, nil
}

type converter struct {
	set      map[string]property // the file's settings
	used     map[string]bool     // keys the mapping looked at
	out      *tree
	notes    []Note
	opts     Options
	problems []string // what the conversion could not do, with the fix
	written  []string // files written into opts.WriteDir
}

// problem records why the written file is not ready, about the pulsar-proxy key path.
func (c *converter) problem(path, msg string) { c.problems = append(c.problems, path+": "+msg) }

// get returns the file's value of key (trimmed), or Apache's default, and whether the file
// sets it to something that is not blank.
func (c *converter) get(key string) (value string, inFile bool) {
	if c.used == nil {
		c.used = map[string]bool{}
	}
	c.used[key] = true
	if p, ok := c.set[key]; ok && p.Value != "" {
		return p.Value, true
	}
	return apacheKeys[key].def, false
}

func (c *converter) line(key string) int { return c.set[key].Line }

// source names a setting for the comment beside the key it became.
func (c *converter) source(keys ...string) string {
	var parts []string
	for _, k := range keys {
		v, inFile := c.get(k)
		switch {
		case inFile && isSecretKey(k):
			parts = append(parts, k+"=<redacted>")
		case inFile:
			parts = append(parts, k+"="+v)
		case v != "":
			parts = append(parts, k+" (Apache's default "+v+")")
		}
	}
	return strings.Join(parts, ", ")
}

func isSecretKey(k string) bool {
	l := strings.ToLower(k)
	return strings.Contains(l, "password") || k == "brokerClientAuthenticationParameters" || k == "tokenSecretKey"
}

// mapped records that key became to (also written as a comment by put).
func (c *converter) mapped(key, to, caveat string, review bool) {
	v, _ := c.get(key)
	if isSecretKey(key) && v != "" {
		v = "<redacted>"
	}
	c.notes = append(c.notes, Note{Key: key, Value: v, Line: c.line(key), To: to, Reason: caveat, Review: review})
}

// dropped records that key, set in the file, is not carried over.
func (c *converter) dropped(key, reason string, review bool) {
	v, _ := c.get(key)
	if isSecretKey(key) && v != "" {
		v = "<redacted>"
	}
	c.notes = append(c.notes, Note{Key: key, Value: v, Line: c.line(key), Reason: reason, Review: review})
}

func (c *converter) convert() {
	c.listeners()
	c.discovery()
	c.httpPlane()
	c.metadataStore()
	c.brokerRule()
	c.brokerTLS()
	c.brokerCredentials()
	c.clientTLS()
	c.authentication()
	c.limits()
}

// listeners: bindAddress with servicePort, servicePortTls and webServicePort.
func (c *converter) listeners() {
	bind, _ := c.get("bindAddress")
	if p, ok := c.set["servicePort"]; ok && p.Value == "" {
		c.get("servicePort")
		c.put("listen.pulsar", hostPort(bind, "6650"), "servicePort= (empty): pulsar-proxy always serves plaintext")
		c.dropped("servicePort", "empty: Apache's proxy then serves TLS only, but pulsar-proxy always serves plaintext on listen.pulsar: keep that port closed to clients (firewall, Service ports) if they must use TLS", true)
	} else if port, inFile := c.get("servicePort"); port != "" {
		c.put("listen.pulsar", hostPort(bind, port), c.source("bindAddress", "servicePort"))
		if inFile || c.setInFile("bindAddress") {
			c.mapped("servicePort", "listen.pulsar", "", false)
		}
	}
	if port, _ := c.get("servicePortTls"); port != "" {
		c.put("listen.pulsarTLS", hostPort(bind, port), c.source("bindAddress", "servicePortTls"))
		c.mapped("servicePortTls", "listen.pulsarTLS", "", false)
	}
	if p, ok := c.set["webServicePort"]; ok && p.Value == "" {
		c.get("webServicePort")
		c.put("listen.http", hostPort(bind, "8080"), "webServicePort= (empty): pulsar-proxy always serves HTTP")
		c.dropped("webServicePort", "empty: Apache's proxy then serves no plain HTTP port, but pulsar-proxy always serves /healthz, /readyz, /metrics and the admin API (admin.enabled) on listen.http: keep that port closed to clients (firewall, Service ports), or turn the admin API off there", true)
	} else if port, inFile := c.get("webServicePort"); port != "" {
		c.put("listen.http", hostPort(bind, port), c.source("bindAddress", "webServicePort"))
		if inFile {
			c.mapped("webServicePort", "listen.http", "serves the admin API (admin.enabled), /healthz, /readyz and /metrics", false)
		}
	}
	if c.setInFile("bindAddress") {
		c.mapped("bindAddress", "listen.pulsar, listen.pulsarTLS, listen.http", "", false)
	}
	if v, inFile := c.get("proxyLogLevel"); inFile && v != "0" {
		c.put("log.sessionSummary", "info", c.source("proxyLogLevel"))
		c.mapped("proxyLogLevel", "log.sessionSummary", "pulsar-proxy logs one line per session at info; it never logs commands or message payloads", true)
	} else if inFile {
		c.mapped("proxyLogLevel", "(nothing: 0 logs no per-connection detail, as pulsar-proxy's default)", "", false)
	}
}

func (c *converter) setInFile(key string) bool {
	_, inFile := c.get(key)
	return inFile
}

func hostPort(host, port string) string {
	if host == "" {
		host = "0.0.0.0"
	}
	return net.JoinHostPort(host, port)
}

// discovery: brokerServiceURL or brokerServiceURLTLS, as tlsEnabledWithBroker picks.
func (c *converter) discovery() {
	tlsOn := c.bool("tlsEnabledWithBroker")
	key, other := "brokerServiceURL", "brokerServiceURLTLS"
	if tlsOn {
		key, other = other, key
		c.put("broker.tls.enabled", true, c.source("tlsEnabledWithBroker"))
		c.mapped("tlsEnabledWithBroker", "broker.tls.enabled", "", false)
	} else if c.setInFile("tlsEnabledWithBroker") {
		c.mapped("tlsEnabledWithBroker", "(nothing: brokers are dialled in plaintext, pulsar-proxy's default)", "", false)
	}
	raw, inFile := c.get(key)
	if !inFile {
		if c.setInFile(other) {
			c.dropped(other, fmt.Sprintf("not used: with tlsEnabledWithBroker=%t Apache's proxy dials %s, which is empty; pulsar-proxy dials every broker one way (broker.tls.enabled). Set discovery.static.brokers (or another discovery) yourself", tlsOn, key), true)
		}
		return
	}
	brokers, err := brokerURLs(raw, tlsOn)
	if err != nil {
		c.dropped(key, err.Error(), true)
		return
	}
	c.put("discovery.static.brokers", brokers, c.source(key))
	c.mapped(key, "discovery.static.brokers",
		"the brokers' Service (or each broker) is asked for lookups; the brokers it names are reached directly (broker.learnedTargetLifetime)", false)
	if _, set := c.get(other); set {
		c.dropped(other, "not used: pulsar-proxy dials every broker one way, over TLS when broker.tls.enabled (tlsEnabledWithBroker)", false)
	}
	if c.bool("checkActiveBrokers") {
		c.mapped("checkActiveBrokers", "(built in)", "pulsar-proxy always checks a direct connection's broker against discovery and the lookup answers it has seen", false)
	} else if c.setInFile("checkActiveBrokers") {
		c.mapped("checkActiveBrokers", "(built in)", "pulsar-proxy checks a direct connection's broker against discovery whatever this says: stricter than Apache's proxy with false", false)
	}
}

// metadataStore: metadataStoreUrl (or the older zookeeperServers) to discovery.metadataStore,
// the ZooKeeper provider, which Apache's proxy uses the same way (its brokers' registrations).
func (c *converter) metadataStore() {
	from := "metadataStoreUrl"
	url, inFile := c.get(from)
	if zk, set := c.get("zookeeperServers"); set && !inFile {
		from, url, inFile = "zookeeperServers", zk, true
	} else if set {
		c.dropped("zookeeperServers", "not used: metadataStoreUrl is set and wins, as in Apache's proxy", false)
	}
	if !inFile {
		c.configurationStoreAlone()
		return
	}
	if scheme, _, ok := strings.Cut(url, ":"); ok && slices.Contains([]string{"etcd", "rocksdb", "memory", "oxia", "metadata-store"}, scheme) {
		c.dropped(from, fmt.Sprintf("a %s metadata store: discovery.metadataStore reads ZooKeeper only; name the brokers with discovery.static, discovery.dns or discovery.consul", scheme), true)
		return
	}
	if _, err := zkaddr.Parse(url); err != nil {
		c.dropped(from, err.Error(), true)
		return
	}
	c.put("discovery.metadataStore.url", url, c.source(from))
	caveat := "the brokers registered under /loadbalance/brokers, followed with a ZooKeeper watch; their web service URLs serve the admin API"
	if c.setInFile("brokerServiceURL") || c.setInFile("brokerServiceURLTLS") {
		caveat += "; with a broker service URL also set, lookups go to the union of both lists (Apache's proxy asks that URL and checks targets against the store)"
	}
	c.mapped(from, "discovery.metadataStore.url", caveat, false)
	c.storeSessionTimeout()
}

// configurationStoreAlone: a file that names a configuration store but no local metadata store
// and no broker URL. Apache's proxy finds no broker then either (it reads the brokers from the
// local store, and only when metadataStoreUrl or zookeeperServers is set); the configuration
// store holds policies. Where it is also the brokers' store, it is what
// discovery.metadataStore.url wants: say so.
func (c *converter) configurationStoreAlone() {
	if c.out.get("discovery.static.brokers") != nil {
		return
	}
	for _, k := range []string{"configurationMetadataStoreUrl", "configurationStoreServers", "globalZookeeperServers"} {
		if c.setInFile(k) {
			c.dropped(k, "no broker is found through it: Apache's proxy reads the brokers from the local metadata store, and only when metadataStoreUrl (or zookeeperServers) is set too; the configuration store holds tenants' and namespaces' policies. If the brokers register in this store, set discovery.metadataStore.url to it (or name them with discovery.static, discovery.dns or discovery.consul)", true)
		}
	}
}

// storeSessionTimeout: metadataStoreSessionTimeoutMillis, or the older zookeeperSessionTimeoutMs
// when that is set to a positive value.
func (c *converter) storeSessionTimeout() {
	key := "metadataStoreSessionTimeoutMillis"
	ms, inFile := c.get(key)
	if old, set := c.get("zookeeperSessionTimeoutMs"); set && old != "-1" && !inFile {
		key, ms, inFile = "zookeeperSessionTimeoutMs", old, true
	}
	n, err := strconv.Atoi(strings.TrimSpace(ms))
	if err != nil || n < 1000 || n > 600000 {
		if inFile {
			c.dropped(key, fmt.Sprintf("%q: want milliseconds from 1000 to 600000; discovery.metadataStore.sessionTimeout keeps its default, 30s", ms), true)
		}
		return
	}
	c.put("discovery.metadataStore.sessionTimeout", (time.Duration(n) * time.Millisecond).String(), c.source(key))
	if inFile {
		c.mapped(key, "discovery.metadataStore.sessionTimeout", "", false)
	}
}

// brokerURLs splits a Pulsar service URL (one scheme, several hosts) into broker URLs.
func brokerURLs(raw string, tlsOn bool) ([]string, error) {
	scheme, hosts, ok := strings.Cut(raw, "://")
	want := "pulsar"
	if tlsOn {
		want = "pulsar+ssl"
	}
	if !ok || scheme != want {
		return nil, fmt.Errorf("%q: want a %s:// URL (tlsEnabledWithBroker=%t)", raw, want, tlsOn)
	}
	hosts = strings.TrimSuffix(hosts, "/")
	var out []string
	for _, h := range strings.Split(hosts, ",") {
		h = strings.TrimSpace(h)
		if h == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			port := "6650"
			if tlsOn {
				port = "6651"
			}
			h = net.JoinHostPort(strings.Trim(h, "[]"), port)
		}
		u := scheme + "://" + h
		if _, _, _, err := brokerhost.ParseURL(u); err != nil {
			return nil, fmt.Errorf("%q: %v", u, err)
		}
		out = append(out, u)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%q names no host", raw)
	}
	return out, nil
}

// brokerRule: the ports, host names and addresses a direct connection may target.
func (c *converter) brokerRule() {
	c.allowedPorts()
	c.allowedWebPorts()
	c.allowedHosts()
	c.allowedIPs()
	c.brokerTimeouts()
}

// allowedPorts: the ports a target may be on.
func (c *converter) allowedPorts() {
	ports, portsInFile := c.get("brokerProxyAllowedTargetPorts")
	var list []int
	wildcard := false
	for _, p := range splitList(ports) {
		if n, err := strconv.Atoi(p); err == nil && n > 0 && n < 65536 {
			list = append(list, n)
			continue
		}
		matched, ok := expandPortPattern(p)
		if !ok {
			wildcard = true
			continue
		}
		list = append(list, matched...)
	}
	if wildcard {
		// Any port: allow the brokers' own ports and Pulsar's two.
		list = append(list, 6650, 6651)
		for _, b := range c.out.strings("discovery.static.brokers") {
			if _, _, port, err := brokerhost.ParseURL(b); err == nil {
				n, _ := strconv.Atoi(port)
				list = append(list, n)
			}
		}
	}
	slices.Sort(list)
	list = slices.Compact(list)
	if !slices.Equal(list, []int{6650, 6651}) {
		c.put("broker.allowedPorts", list, c.source("brokerProxyAllowedTargetPorts"))
	}
	switch {
	case wildcard:
		c.mapped("brokerProxyAllowedTargetPorts", "broker.allowedPorts",
			"pulsar-proxy lists the ports a broker may be on; the converted list holds 6650, 6651 and the ports of the broker URLs instead of any port", true)
	case portsInFile:
		c.mapped("brokerProxyAllowedTargetPorts", "broker.allowedPorts", "", false)
	}
}

// allowedWebPorts: Apache's proxy sends admin requests wherever its web service URLs say;
// pulsar-proxy only to broker.allowedWebPorts, so the converted webBrokers' ports join Pulsar's
// two (httpPlane has put them by now).
func (c *converter) allowedWebPorts() {
	list := []int{8080, 8443}
	for _, u := range c.out.strings("discovery.static.webBrokers") {
		if _, _, port, err := brokerhost.ParseWebURL(u); err == nil {
			n, _ := strconv.Atoi(port)
			list = append(list, n)
		}
	}
	slices.Sort(list)
	list = slices.Compact(list)
	if !slices.Equal(list, []int{8080, 8443}) {
		key := "brokerWebServiceURL"
		if c.bool("tlsEnabledWithBroker") {
			key += "TLS"
		}
		c.put("broker.allowedWebPorts", list, c.source(key)+", beside Pulsar's web ports 8080 and 8443")
	}
}

// allowedHosts: the host name patterns a target may match.
func (c *converter) allowedHosts() {
	hosts, hostsInFile := c.get("brokerProxyAllowedHostNames")
	var patterns []string
	for _, h := range splitList(hosts) {
		if h == "*" {
			continue
		}
		if err := brokerhost.CheckPattern(h); err != nil {
			c.notes = append(c.notes, Note{Key: "brokerProxyAllowedHostNames", Value: h, Line: c.line("brokerProxyAllowedHostNames"),
				Reason: fmt.Sprintf("pattern %q is not carried over: %v", h, err), Review: true})
			continue
		}
		patterns = append(patterns, h)
	}
	if len(patterns) > 0 {
		c.put("broker.allowedHosts", patterns, c.source("brokerProxyAllowedHostNames"))
		c.mapped("brokerProxyAllowedHostNames", "broker.allowedHosts",
			"in pulsar-proxy a '*' matches within one DNS label (it never crosses a dot), in Apache's proxy across labels: check that the patterns still match your brokers' names", true)
	} else if hostsInFile || hosts == "*" {
		c.mapped("brokerProxyAllowedHostNames", "(built in)", "any host ('*') is not carried over: pulsar-proxy lets a client target only a broker that discovery lists or that a broker named in a lookup answer (stricter); add broker.allowedHosts patterns if clients name brokers some other way", false)
	}
}

// allowedIPs: the addresses a target may be.
func (c *converter) allowedIPs() {
	ips, ipsInFile := c.get("brokerProxyAllowedIPAddresses")
	var literal []string
	for _, ip := range splitList(ips) {
		if ip == "*" {
			continue
		}
		if a := net.ParseIP(ip); a != nil && a.To4() != nil {
			literal = append(literal, ip) // an IPv4 literal is a host pattern of digits
			continue
		}
		c.notes = append(c.notes, Note{Key: "brokerProxyAllowedIPAddresses", Value: ip, Line: c.line("brokerProxyAllowedIPAddresses"),
			Reason: "pulsar-proxy has no address or network allow-list: brokers are allowed by discovery, lookup answers and broker.allowedHosts (hosts are compared as written, never resolved)", Review: true})
	}
	if len(literal) > 0 {
		c.put("broker.allowedHosts", append(c.out.strings("broker.allowedHosts"), literal...), c.source("brokerProxyAllowedHostNames", "brokerProxyAllowedIPAddresses"))
		c.mapped("brokerProxyAllowedIPAddresses", "broker.allowedHosts", "IPv4 addresses allowed as written targets", false)
	} else if ipsInFile && ips == "*" {
		c.mapped("brokerProxyAllowedIPAddresses", "(built in)", "any address ('*'): pulsar-proxy allows brokers by discovery and lookup answers instead", false)
	}
}

// brokerTimeouts: the dial timeout and the keep-alive.
func (c *converter) brokerTimeouts() {
	if ms, inFile := c.get("brokerProxyConnectTimeoutMs"); ms != "" {
		if n, err := strconv.Atoi(ms); err == nil && n > 0 {
			c.put("broker.dialTimeout", (time.Duration(n) * time.Millisecond).String(), c.source("brokerProxyConnectTimeoutMs"))
			if inFile {
				c.mapped("brokerProxyConnectTimeoutMs", "broker.dialTimeout", "", false)
			}
		} else if inFile {
			c.dropped("brokerProxyConnectTimeoutMs", fmt.Sprintf("%q: pulsar-proxy always bounds a dial (broker.dialTimeout, default 5s)", ms), true)
		}
	}
	if v, inFile := c.get("keepAliveIntervalSeconds"); inFile {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			c.put("session.keepAliveInterval", (time.Duration(n) * time.Second).String(), c.source("keepAliveIntervalSeconds"))
			c.mapped("keepAliveIntervalSeconds", "session.keepAliveInterval", "", false)
		} else {
			c.dropped("keepAliveIntervalSeconds", fmt.Sprintf("%q: pulsar-proxy always pings idle lookup connections (session.keepAliveInterval, default 30s)", v), true)
		}
	}
}

// expandPortPattern reads a port pattern of Apache's allow-list ('*' for any run of digits)
// as the ports it matches; ok is false for one that matches too many to list.
func expandPortPattern(p string) ([]int, bool) {
	if !strings.Contains(p, "*") {
		return nil, false
	}
	re, err := regexp.Compile("^" + strings.ReplaceAll(regexp.QuoteMeta(p), `\*`, ".*") + "$")
	if err != nil {
		return nil, false
	}
	var out []int
	for n := 1; n < 65536; n++ {
		if re.MatchString(strconv.Itoa(n)) {
			out = append(out, n)
			if len(out) > 64 {
				return nil, false
			}
		}
	}
	return out, len(out) > 0
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func (c *converter) bool(key string) bool {
	v, _ := c.get(key)
	return strings.EqualFold(strings.TrimSpace(v), "true")
}

// brokerTLS: the CA, client certificate, host name check and protocols towards brokers.
func (c *converter) brokerTLS() {
	tlsOn := c.bool("tlsEnabledWithBroker")
	files := []struct{ key, to string }{
		{"brokerClientTrustCertsFilePath", "broker.tls.trustCertsFile"},
		{"brokerClientCertificateFilePath", "broker.tls.certFile"},
		{"brokerClientKeyFilePath", "broker.tls.keyFile"},
	}
	for _, f := range files {
		v, inFile := c.get(f.key)
		if !inFile {
			continue
		}
		if !tlsOn {
			c.dropped(f.key, "not used: tlsEnabledWithBroker is false", false)
			continue
		}
		c.put(f.to, filePath(v), c.source(f.key))
		c.mapped(f.key, f.to, "", false)
	}
	verify, inFile := c.get("tlsHostnameVerificationEnabled")
	if tlsOn {
		if strings.EqualFold(verify, "true") {
			if inFile {
				c.mapped("tlsHostnameVerificationEnabled", "(pulsar-proxy's default: broker.tls.skipHostnameVerification false)", "", false)
			}
		} else {
			c.put("broker.tls.skipHostnameVerification", true, c.source("tlsHostnameVerificationEnabled"))
			c.mapped("tlsHostnameVerificationEnabled", "broker.tls.skipHostnameVerification",
				"Apache's proxy (4.0) does not check that a broker's certificate names the broker; the converted file keeps that. Set broker.tls.skipHostnameVerification to false (pulsar-proxy's default) once the certificates name the hosts the proxy dials", true)
		}
	} else if inFile {
		c.dropped("tlsHostnameVerificationEnabled", "not used: tlsEnabledWithBroker is false", false)
	}
	if v, inFile := c.get("brokerClientTlsProtocols"); inFile {
		min, dropped := lowestTLS(v, true)
		if min != "" && tlsOn {
			c.put("broker.tls.minVersion", min, c.source("brokerClientTlsProtocols"))
			c.mapped("brokerClientTlsProtocols", "broker.tls.minVersion", joinNote("the lowest listed version; Go negotiates the highest both sides speak", dropped), dropped != "")
		} else {
			c.dropped("brokerClientTlsProtocols", joinNote("no TLS 1.2 or 1.3 listed (or tlsEnabledWithBroker is false): pulsar-proxy speaks TLS 1.2 or newer to brokers", dropped), true)
		}
	}
}

func joinNote(a, b string) string {
	if b == "" {
		return a
	}
	return a + "; " + b
}

// lowestTLS reads a list of Java protocol names (TLSv1.2, TLSv1.3, …) as pulsar-proxy's
// minimum version; brokerSide allows 1.2 and 1.3 only.
func lowestTLS(list string, brokerSide bool) (min, dropped string) {
	versions := map[string]string{"TLSv1": "1.0", "TLSv1.1": "1.1", "TLSv1.2": "1.2", "TLSv1.3": "1.3"}
	var got, bad []string
	for _, p := range splitList(list) {
		v, ok := versions[p]
		if !ok || (brokerSide && v < "1.2") {
			bad = append(bad, p)
			continue
		}
		got = append(got, v)
	}
	if len(bad) > 0 {
		dropped = "not carried over: " + strings.Join(bad, ", ")
	}
	if len(got) == 0 {
		return "", dropped
	}
	slices.Sort(got)
	return got[0], dropped
}

// filePath turns Pulsar's file:// URLs into paths.
func filePath(v string) string {
	if u, err := url.Parse(v); err == nil && u.Scheme == "file" {
		return u.Path
	}
	return v
}

// brokerCredentials: the proxy's own authentication towards brokers.
func (c *converter) brokerCredentials() {
	plugin, pluginSet := c.get("brokerClientAuthenticationPlugin")
	params, paramsSet := c.get("brokerClientAuthenticationParameters")
	if !pluginSet {
		if paramsSet {
			c.dropped("brokerClientAuthenticationParameters", "not used: brokerClientAuthenticationPlugin is empty", false)
		}
		return
	}
	short := plugin[strings.LastIndexByte(plugin, '.')+1:]
	switch short {
	case "AuthenticationToken":
		c.brokerToken(params)
		c.mapped("brokerClientAuthenticationPlugin", "auth.brokerClient", "", false)
	case "AuthenticationTls":
		cert, key := tlsAuthParams(params)
		if cert == "" || key == "" {
			c.dropped("brokerClientAuthenticationParameters", "AuthenticationTls parameters name no tlsCertFile and tlsKeyFile", true)
			return
		}
		c.put("broker.tls.certFile", filePath(cert), "brokerClientAuthenticationPlugin=AuthenticationTls, tlsCertFile")
		c.put("broker.tls.keyFile", filePath(key), "brokerClientAuthenticationPlugin=AuthenticationTls, tlsKeyFile")
		c.mapped("brokerClientAuthenticationPlugin", "broker.tls.certFile, broker.tls.keyFile", "the proxy presents the certificate in its TLS handshake with brokers (broker.tls.enabled)", !c.bool("tlsEnabledWithBroker"))
		c.mapped("brokerClientAuthenticationParameters", "broker.tls.certFile, broker.tls.keyFile", "", false)
	default:
		c.dropped("brokerClientAuthenticationPlugin", fmt.Sprintf("%s is not supported: pulsar-proxy authenticates to brokers with a token (auth.brokerClient.token or tokenFile) or a client certificate (broker.tls.certFile)", plugin), true)
		if paramsSet {
			c.dropped("brokerClientAuthenticationParameters", "the parameters of an unsupported plugin", true)
		}
	}
}

// brokerToken reads AuthenticationToken's parameters: "token:…", "file://…", a JSON object
// with "token", or the token itself.
func (c *converter) brokerToken(params string) {
	p := strings.TrimSpace(params)
	var obj struct {
		Token string `json:"token"`
	}
	switch {
	case strings.HasPrefix(p, "token:"):
		p = strings.TrimPrefix(p, "token:")
	case strings.HasPrefix(p, "file:"):
		c.put("auth.brokerClient.tokenFile", filePath(p), "brokerClientAuthenticationParameters (a file URL)")
		c.mapped("brokerClientAuthenticationParameters", "auth.brokerClient.tokenFile", "", false)
		return
	case strings.HasPrefix(p, "{") && json.Unmarshal([]byte(p), &obj) == nil:
		p = obj.Token
	}
	if p == "" {
		c.dropped("brokerClientAuthenticationParameters", "AuthenticationToken without a token", true)
		return
	}
	c.put("auth.brokerClient.token", p, "brokerClientAuthenticationParameters (the token itself)")
	c.mapped("brokerClientAuthenticationParameters", "auth.brokerClient.token",
		"the token is written into config.yaml as it was in proxy.conf; better: put it in a file (a Secret) and set auth.brokerClient.tokenFile", true)
}

// tlsAuthParams reads AuthenticationTls's parameters: "tlsCertFile:…,tlsKeyFile:…" or JSON.
func tlsAuthParams(params string) (cert, key string) {
	var obj struct {
		Cert string `json:"tlsCertFile"`
		Key  string `json:"tlsKeyFile"`
	}
	if json.Unmarshal([]byte(params), &obj) == nil {
		return obj.Cert, obj.Key
	}
	for _, kv := range splitList(params) {
		k, v, _ := strings.Cut(kv, ":")
		switch strings.TrimSpace(k) {
		case "tlsCertFile":
			cert = strings.TrimSpace(v)
		case "tlsKeyFile":
			key = strings.TrimSpace(v)
		}
	}
	return cert, key
}

// clientTLS: the TLS listener's certificate, client certificates, protocols and ciphers.
func (c *converter) clientTLS() {
	for _, f := range []struct{ key, to string }{
		{"tlsCertificateFilePath", "tls.certFile"},
		{"tlsKeyFilePath", "tls.keyFile"},
	} {
		if v, inFile := c.get(f.key); inFile {
			c.put(f.to, filePath(v), c.source(f.key))
			c.mapped(f.key, f.to, "", false)
		}
	}
	require := c.bool("tlsRequireTrustedClientCertOnConnect")
	tlsProvider := c.hasProvider("AuthenticationProviderTls")
	if ca, inFile := c.get("tlsTrustCertsFilePath"); inFile {
		if require || tlsProvider {
			c.put("tls.clientCAFile", filePath(ca), c.source("tlsTrustCertsFilePath"))
			mode := "request"
			if require {
				mode = "require"
			}
			c.put("tls.clientAuth", mode, c.source("tlsRequireTrustedClientCertOnConnect"))
			c.mapped("tlsTrustCertsFilePath", "tls.clientCAFile", "verifies client certificates", false)
		} else {
			c.dropped("tlsTrustCertsFilePath", "not used: no client certificates are asked for (tlsRequireTrustedClientCertOnConnect is false and AuthenticationProviderTls is not enabled)", false)
		}
	}
	if c.setInFile("tlsRequireTrustedClientCertOnConnect") {
		to := "tls.clientAuth"
		if !require {
			to = "(nothing: no client certificate is required, pulsar-proxy's default)"
		}
		c.mapped("tlsRequireTrustedClientCertOnConnect", to, "", false)
	}
	c.tlsProtocols()
	c.tlsCiphers()
}

// tlsProtocols: the lowest TLS version offered.
func (c *converter) tlsProtocols() {
	if v, inFile := c.get("tlsProtocols"); inFile {
		min, dropped := lowestTLS(v, false)
		if min != "" {
			c.put("tls.minVersion", min, c.source("tlsProtocols"))
			c.mapped("tlsProtocols", "tls.minVersion", joinNote("the lowest listed version; Go negotiates the highest both sides speak", dropped), dropped != "")
		} else {
			c.dropped("tlsProtocols", joinNote("no TLS version pulsar-proxy knows", dropped), true)
		}
	}
}

// tlsCiphers: the TLS 1.2 cipher suites Go knows of those listed.
func (c *converter) tlsCiphers() {
	if v, inFile := c.get("tlsCiphers"); inFile {
		known := map[string]bool{}
		for _, s := range tls.CipherSuites() {
			known[s.Name] = true
		}
		var kept, tls13, unknown []string
		for _, s := range splitList(v) {
			switch {
			case known[s] && slices.Contains(goTLS12Suites(), s):
				kept = append(kept, s)
			case known[s]:
				tls13 = append(tls13, s)
			default:
				unknown = append(unknown, s)
			}
		}
		var why []string
		if len(tls13) > 0 {
			why = append(why, "TLS 1.3 suites are not configurable in Go (all are offered): "+strings.Join(tls13, ", "))
		}
		if len(unknown) > 0 {
			why = append(why, "not a cipher suite Go offers (or not an IANA name): "+strings.Join(unknown, ", "))
		}
		if len(kept) > 0 {
			c.put("tls.cipherSuites", kept, c.source("tlsCiphers"))
			c.mapped("tlsCiphers", "tls.cipherSuites", strings.Join(why, "; "), len(why) > 0)
		} else {
			c.dropped("tlsCiphers", joinNote("no TLS 1.2 suite Go knows is listed; Go's defaults apply", strings.Join(why, "; ")), len(unknown) > 0)
		}
	}
}

// goTLS12Suites are the secure suites Go lets a configuration choose (TLS 1.0–1.2).
func goTLS12Suites() []string {
	var out []string
	for _, s := range tls.CipherSuites() {
		if !slices.Contains(s.SupportedVersions, tls.VersionTLS13) {
			out = append(out, s.Name)
		}
	}
	return out
}

// hasProvider reports whether authenticationProviders names a class whose simple name is short.
func (c *converter) hasProvider(short string) bool {
	v, _ := c.get("authenticationProviders")
	for _, p := range splitList(v) {
		if p[strings.LastIndexByte(p, '.')+1:] == short {
			return true
		}
	}
	return false
}

// authentication: authenticationEnabled, the providers and their properties.
func (c *converter) authentication() {
	enabled := c.bool("authenticationEnabled")
	if !enabled {
		if c.setInFile("authenticationEnabled") {
			c.mapped("authenticationEnabled", "(nothing: auth.enabled is false by default)", "", false)
		}
		for _, k := range []string{"authenticationProviders", "anonymousUserRole", "forwardAuthorizationCredentials",
			"tokenSecretKey", "tokenPublicKey", "tokenAuthClaim", "tokenAudienceClaim", "tokenAudience", "tokenPublicAlg"} {
			if c.setInFile(k) {
				c.dropped(k, "not used: authenticationEnabled is false", false)
			}
		}
		return
	}
	c.put("auth.enabled", true, c.source("authenticationEnabled"))
	c.mapped("authenticationEnabled", "auth.enabled", "", false)
	if v, inFile := c.get("anonymousUserRole"); inFile {
		c.put("auth.anonymousRole", v, c.source("anonymousUserRole"))
		c.mapped("anonymousUserRole", "auth.anonymousRole", "", false)
	}
	if c.bool("forwardAuthorizationCredentials") {
		c.put("auth.forwardClientCredentials", true, c.source("forwardAuthorizationCredentials"))
		c.mapped("forwardAuthorizationCredentials", "auth.forwardClientCredentials", "", false)
	} else if c.setInFile("forwardAuthorizationCredentials") {
		c.mapped("forwardAuthorizationCredentials", "(nothing: off by default)", "", false)
	}
	providers, _ := c.get("authenticationProviders")
	var unsupported []string
	for _, p := range splitList(providers) {
		switch p[strings.LastIndexByte(p, '.')+1:] {
		case "AuthenticationProviderToken":
			c.tokenProvider()
		case "AuthenticationProviderTls":
			// The tls method is on with a TLS listener and a client CA (clientTLS).
			if c.out.get("listen.pulsarTLS") == nil || c.out.get("tls.clientCAFile") == nil {
				unsupported = append(unsupported, p+" (needs servicePortTls and tlsTrustCertsFilePath)")
			}
		case "AuthenticationProviderOpenID":
			c.openIDProvider()
		default:
			unsupported = append(unsupported, p)
		}
	}
	to := "auth (token: auth.token.*, tls: the client certificate's CN)"
	if len(unsupported) > 0 {
		c.mapped("authenticationProviders", to, "not supported: "+strings.Join(unsupported, ", ")+"; pulsar-proxy authenticates tokens (a key or an identity provider's key set) and client certificates", true)
	} else {
		c.mapped("authenticationProviders", to, "", false)
	}
}

// tokenProvider: AuthenticationProviderToken's properties.
func (c *converter) tokenProvider() {
	if v, inFile := c.get("tokenSecretKey"); inFile {
		if path, ok := keyPath(v); ok {
			c.tokenSecretKeyFile(path)
		} else {
			c.tokenSecretKeyInline(v)
		}
	}
	if v, inFile := c.get("tokenPublicKey"); inFile {
		c.tokenPublicKey(v)
	}
	c.clockSkew()
	if v, inFile := c.get("tokenAuthClaim"); inFile {
		c.put("auth.token.roleClaim", v, c.source("tokenAuthClaim"))
		c.mapped("tokenAuthClaim", "auth.token.roleClaim", "", false)
	}
	claim, claimSet := c.get("tokenAudienceClaim")
	aud, audSet := c.get("tokenAudience")
	switch {
	case audSet && claim == "aud":
		c.put("auth.token.audience", aud, c.source("tokenAudienceClaim", "tokenAudience"))
		c.mapped("tokenAudience", "auth.token.audience", "", false)
		c.mapped("tokenAudienceClaim", "auth.token.audience", "", false)
	case audSet && claimSet:
		c.dropped("tokenAudienceClaim", fmt.Sprintf("%q: pulsar-proxy checks the audience in the standard aud claim only", claim), true)
		c.dropped("tokenAudience", "not carried over with its non-standard claim", true)
	case audSet || claimSet:
		for _, k := range []string{"tokenAudience", "tokenAudienceClaim"} {
			if c.setInFile(k) {
				c.dropped(k, "Pulsar checks the audience only when both tokenAudienceClaim and tokenAudience are set", false)
			}
		}
	}
	if v, inFile := c.get("tokenPublicAlg"); inFile {
		if v == "RS256" || v == "ES256" {
			c.mapped("tokenPublicAlg", "(built in)", "pulsar-proxy takes the algorithm from the key (RSA: RS256, EC: ES256)", false)
		} else {
			c.dropped("tokenPublicAlg", fmt.Sprintf("%s: pulsar-proxy verifies static public keys with RS256 or ES256 only (an identity provider's key set, auth.token.jwksURL, allows more)", v), true)
		}
	}
}

// keyPath reads tokenSecretKey/tokenPublicKey as a file path when it is one, as Pulsar does: a
// file: URL, or a file that exists; a data: URL or other base64 text is the key itself. A path
// to a file that is not here (converted on another machine) is told from base64 text by its
// leading slash, a character base64 lacks, or its length.
func keyPath(v string) (string, bool) {
	switch {
	case strings.HasPrefix(v, "file:"):
		return filePath(v), true
	case strings.HasPrefix(v, "data:"):
		return "", false
	}
	if _, err := os.Stat(v); err == nil {
		return v, true
	}
	// A key is 32 bytes or more (HS256's least; a DER public key is longer).
	if b, err := base64.StdEncoding.DecodeString(v); err == nil && len(b) >= 32 && !strings.HasPrefix(v, "/") {
		return "", false
	}
	return v, true
}

// clockSkew: the token provider's tokenAllowedClockSkewSeconds is auth.token.leeway, as
// OpenID Connect's openIDAcceptedTimeLeewaySeconds is (the larger wins when both are set).
func (c *converter) clockSkew() {
	v, inFile := c.get("tokenAllowedClockSkewSeconds")
	if !inFile {
		return
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		c.dropped("tokenAllowedClockSkewSeconds", fmt.Sprintf("%q is not a number of seconds", v), true)
		return
	}
	c.leeway("tokenAllowedClockSkewSeconds", n)
}

// leeway sets auth.token.leeway from key (seconds); one leeway holds for every token, so with
// both providers' settings the larger is kept.
func (c *converter) leeway(key string, seconds int) {
	d := time.Duration(seconds) * time.Second
	if s, ok := c.out.get("auth.token.leeway").(string); ok {
		if old, err := time.ParseDuration(s); err == nil && old >= d {
			c.mapped(key, "auth.token.leeway", "the other provider's leeway is as large and is kept: one leeway holds for every token", false)
			return
		}
	}
	c.put("auth.token.leeway", d.String(), c.source(key))
	c.mapped(key, "auth.token.leeway", "", false)
}

// openIDProvider: AuthenticationProviderOpenID's properties, as an identity provider's key set.
func (c *converter) openIDProvider() {
	if v, inFile := c.get("openIDAllowedTokenIssuers"); inFile {
		issuers := splitList(v)
		c.put("auth.token.issuers", issuers, c.source("openIDAllowedTokenIssuers"))
		c.mapped("openIDAllowedTokenIssuers", "auth.token.issuers",
			"pulsar-proxy does not read the issuer's discovery document: set auth.token.jwksURL to its jwks_uri (from <issuer>/.well-known/openid-configuration)", true)
	}
	if v, inFile := c.get("openIDAllowedAudiences"); inFile {
		auds := splitList(v)
		c.put("auth.token.audience", auds[0], c.source("openIDAllowedAudiences"))
		caveat := ""
		if len(auds) > 1 {
			caveat = "pulsar-proxy accepts one audience; the first is kept: " + strings.Join(auds[1:], ", ") + " dropped"
		}
		c.mapped("openIDAllowedAudiences", "auth.token.audience", caveat, len(auds) > 1)
	}
	if v, inFile := c.get("openIDRoleClaim"); inFile {
		c.put("auth.token.roleClaim", v, c.source("openIDRoleClaim"))
		c.mapped("openIDRoleClaim", "auth.token.roleClaim", "", false)
	}
	if v, inFile := c.get("openIDAcceptedTimeLeewaySeconds"); inFile {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 {
			c.leeway("openIDAcceptedTimeLeewaySeconds", n)
		} else {
			c.dropped("openIDAcceptedTimeLeewaySeconds", fmt.Sprintf("%q is not a number of seconds", v), true)
		}
	}
	if v, inFile := c.get("openIDTokenIssuerTrustCertsFilePath"); inFile {
		c.put("auth.token.jwksCAFile", filePath(v), c.source("openIDTokenIssuerTrustCertsFilePath"))
		c.mapped("openIDTokenIssuerTrustCertsFilePath", "auth.token.jwksCAFile", "", false)
	}
	for _, d := range []struct {
		key, to string
		unit    time.Duration
	}{
		{"openIDCacheRefreshAfterWriteSeconds", "auth.token.jwksRefreshInterval", time.Second},
		{"openIDKeyIdCacheMissRefreshSeconds", "auth.token.jwksMinRefetchInterval", time.Second},
		{"openIDHttpConnectionTimeoutMillis", "auth.token.jwksTimeout", time.Millisecond},
	} {
		if v, inFile := c.get(d.key); inFile {
			if n, err := strconv.Atoi(v); err == nil && n > 0 {
				c.put(d.to, (time.Duration(n) * d.unit).String(), c.source(d.key))
				c.mapped(d.key, d.to, "", false)
			} else {
				c.dropped(d.key, fmt.Sprintf("%q is not a positive number", v), true)
			}
		}
	}
}

// limits: connections, message size, zero copy, PROXY protocol.
func (c *converter) limits() {
	if v, inFile := c.get("maxConcurrentInboundConnections"); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 {
			c.put("session.maxConnections", n, c.source("maxConcurrentInboundConnections"))
			if inFile {
				c.mapped("maxConcurrentInboundConnections", "session.maxConnections", "", false)
			}
		} else if inFile {
			c.dropped("maxConcurrentInboundConnections", fmt.Sprintf("%q is not a number", v), true)
		}
	}
	if v, inFile := c.get("maxConcurrentInboundConnectionsPerIp"); inFile {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 {
			if n > 0 {
				c.put("session.maxConnectionsPerIP", n, c.source("maxConcurrentInboundConnectionsPerIp"))
			}
			c.mapped("maxConcurrentInboundConnectionsPerIp", "session.maxConnectionsPerIP", "", false)
		} else {
			c.dropped("maxConcurrentInboundConnectionsPerIp", fmt.Sprintf("%q is not a number", v), true)
		}
	}
	c.lookupsInFlight()
	if v, inFile := c.get("maxMessageSize"); inFile {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			c.put("session.maxFrameSize", n+10*1024, c.source("maxMessageSize"))
			c.mapped("maxMessageSize", "session.maxFrameSize", "the largest message plus the 10 KiB clients reserve around it", false)
		} else {
			c.dropped("maxMessageSize", fmt.Sprintf("%q is not a number", v), true)
		}
	}
	if v, inFile := c.get("proxyZeroCopyModeEnabled"); inFile {
		on := strings.EqualFold(v, "true")
		if !on {
			c.put("session.passthrough", false, c.source("proxyZeroCopyModeEnabled"))
		}
		c.mapped("proxyZeroCopyModeEnabled", "session.passthrough", "splice(2) socket to socket where nothing needs to inspect the frames, as Apache's zero-copy mode", false)
	}
	if c.bool("haProxyProtocolEnabled") {
		c.put("proxyProtocol.enabled", true, c.source("haProxyProtocolEnabled"))
		c.put("proxyProtocol.trustedCIDRs", []string{"0.0.0.0/0", "::/0"}, "haProxyProtocolEnabled=true: Apache's proxy takes a PROXY header from anyone (narrow this)")
		c.mapped("haProxyProtocolEnabled", "proxyProtocol.enabled, proxyProtocol.trustedCIDRs",
			"Apache's proxy takes a PROXY header from any source, so the converted file trusts every address (0.0.0.0/0, ::/0); narrow proxyProtocol.trustedCIDRs to your load balancers, or any client can claim any address", true)
	} else if c.setInFile("haProxyProtocolEnabled") {
		c.mapped("haProxyProtocolEnabled", "(nothing: off by default)", "", false)
	}
}

// lookupsInFlight: maxConcurrentLookupRequests, the lookups Apache's proxy answers at once
// (a semaphore over all clients), is session.maxLookupsInFlight; both default to 50000.
func (c *converter) lookupsInFlight() {
	const key, to = "maxConcurrentLookupRequests", "session.maxLookupsInFlight"
	v, inFile := c.get(key)
	if !inFile {
		return
	}
	n, err := strconv.Atoi(v)
	switch {
	case err != nil:
		c.dropped(key, fmt.Sprintf("%q is not a number; %s keeps its default, 50000", v, to), true)
	case n <= 0:
		c.dropped(key, fmt.Sprintf("%d: Apache's proxy then refuses every lookup (a semaphore of no permits), while pulsar-proxy reads 0 as unbounded; not carried over: set %s yourself", n, to), true)
	case sameValue(v, apacheKeys[key].def):
		c.mapped(key, to, "Apache's default is pulsar-proxy's too: not written", false)
	default:
		c.put(to, n, c.source(key))
		c.mapped(key, to, "the lookups answered at once, all clients together; beyond it a lookup is refused with TooManyRequests, as in Apache's proxy", false)
	}
}

// unmapped reports every setting of the file the mapping did not consume.
func (c *converter) unmapped() {
	keys := make([]string, 0, len(c.set))
	for k := range c.set {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return c.set[keys[i]].Line < c.set[keys[j]].Line })
	for _, k := range keys {
		if c.noted(k) {
			continue
		}
		p := c.set[k]
		info, known := apacheKeys[k]
		switch {
		case strings.HasPrefix(k, "brokerClient_"):
			c.notes = append(c.notes, Note{Key: k, Value: p.Value, Line: p.Line, Reason: "a setting of Apache's Java client towards brokers: " + reasonPropertyKnown, Review: p.Value != ""})
		case httpReverseProxyKey.MatchString(k):
			c.notes = append(c.notes, Note{Key: k, Value: p.Value, Line: p.Line, Reason: reasonReverseProxy, Review: true})
		case !known:
			c.notes = append(c.notes, Note{Key: k, Value: p.Value, Line: p.Line, Reason: "not a setting of Apache Pulsar's 4.x proxy (4.0.8, or one added in 4.1), nor a property of an authentication provider pulsar-proxy knows", Review: p.Value != ""})
		case info.reason != "":
			// An empty value keeps Apache's default for every setting with a reason (a string
			// or number keeps it, a list is empty by default).
			atDefault := p.Value == "" || (!info.varies && sameValue(p.Value, info.def))
			reason := info.reason
			switch {
			case atDefault:
				reason = "at Apache's default; " + reason
			case info.varies:
				reason = "Apache's default is " + info.variesAs + "; " + reason
			}
			c.notes = append(c.notes, Note{Key: k, Value: p.Value, Line: p.Line, Reason: reason, Review: !atDefault && !info.harmless})
		case p.Value == "":
			c.notes = append(c.notes, Note{Key: k, Line: p.Line, Reason: "empty: nothing to carry over"})
		default:
			c.notes = append(c.notes, Note{Key: k, Value: p.Value, Line: p.Line, Reason: "not used by this configuration (it depends on a setting that is off)"})
		}
	}
}

// httpReverseProxyKey matches the settings of one of Apache's HTTP redirects
// (httpReverseProxy.NAME.path and httpReverseProxy.NAME.proxyTo).
var httpReverseProxyKey = regexp.MustCompile(`^httpReverseProxy\.[^.]*\..+$`)

// sameValue reports whether a value of the file is Apache's default spelt another way: a
// boolean in another case, a number with another spelling (100 and 100.0), a list in another
// order or with spaces.
func sameValue(v, def string) bool {
	v, def = strings.TrimSpace(v), strings.TrimSpace(def)
	if v == def || (isBool(v) && strings.EqualFold(v, def)) {
		return true
	}
	if a, err := strconv.ParseFloat(v, 64); err == nil {
		b, err := strconv.ParseFloat(def, 64)
		return err == nil && a == b
	}
	if strings.Contains(v, ",") || strings.Contains(def, ",") {
		a, b := splitList(v), splitList(def)
		slices.Sort(a)
		slices.Sort(b)
		return slices.Equal(a, b)
	}
	return false
}

func isBool(v string) bool { return strings.EqualFold(v, "true") || strings.EqualFold(v, "false") }

func (c *converter) noted(key string) bool {
	return slices.ContainsFunc(c.notes, func(n Note) bool { return n.Key == key })
}

// validate runs check-config's checks on the written configuration, as `pulsar-proxy
// check-config FILE` would where the conversion runs (no environment applied): the errors are
// the problems (config.Load's words when it does not load), the warnings are returned beside.
func validate(y []byte) (problems, warnings []string) {
	dir, err := os.MkdirTemp("", "convert-config-")
	if err != nil {
		return []string{err.Error()}, nil
	}
	defer os.RemoveAll(dir)
	f := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(f, y, 0o600); err != nil {
		return []string{err.Error()}, nil
	}
	r := checkconfig.Check(f, nil, time.Now())
	for _, fd := range r.Findings {
		msg := strings.ReplaceAll(fd.Message, f, "config.yaml")
		if fd.Key != "config" {
			msg = fd.Key + ": " + msg
		}
		switch fd.Severity {
		case checkconfig.Error:
			problems = append(problems, msg)
		case checkconfig.Warning:
			warnings = append(warnings, msg)
		}
	}
	return problems, warnings
}

// WriteReport writes the report: what was mapped, what was not and why, and whether the
// result validates.
func (r *Result) WriteReport(w io.Writer, name string) {
	var mapped, review, other []Note
	for _, n := range r.Notes {
		switch {
		case n.Review:
			review = append(review, n)
		case n.To != "":
			mapped = append(mapped, n)
		default:
			other = append(other, n)
		}
	}
	fmt.Fprintf(w, "convert-config: %s: %d setting(s) carried over, %d to review, %d not carried over\n", name, len(mapped), len(review), len(other))
	section := func(title string, notes []Note) {
		if len(notes) == 0 {
			return
		}
		sort.SliceStable(notes, func(i, j int) bool { return notes[i].Line < notes[j].Line })
		fmt.Fprintf(w, "\n%s:\n", title)
		for _, n := range notes {
			fmt.Fprintf(w, "  %s\n", n.line())
		}
	}
	section("REVIEW (changes behaviour or needs your hand)", review)
	section("carried over", mapped)
	section("not carried over", other)
	list := func(title string, lines []string) {
		if len(lines) > 0 {
			fmt.Fprintf(w, "\n%s:\n", title)
			for _, l := range lines {
				fmt.Fprintf(w, "  %s\n", l)
			}
		}
	}
	list("files written beside the config.yaml (ship them with it)", r.Written)
	list("check-config warns", r.Warnings)
	fmt.Fprintln(w)
	if r.Valid() {
		fmt.Fprintln(w, "check-config passes the written config.yaml here; run `pulsar-proxy check-config --connect` on it where the proxy will run")
		return
	}
	fmt.Fprintln(w, "the written config.yaml is not ready yet (check-config would refuse it); it needs:")
	for _, p := range r.Problems {
		fmt.Fprintf(w, "  %s\n", p)
	}
}

func (n Note) line() string {
	var b bytes.Buffer
	if n.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", n.Line)
	}
	b.WriteString(n.Key)
	if n.Value != "" {
		b.WriteString("=" + n.Value)
	}
	if n.To != "" {
		b.WriteString(" -> " + n.To)
	}
	if n.Reason != "" {
		b.WriteString(": " + n.Reason)
	}
	return b.String()
}
