package discovery

import (
	"bytes"
	"fmt"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/miekg/dns"
	"github.com/pulsar-proxy/pulsar-proxy/brokers"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/wait"
	"github.com/rs/zerolog"
)

// The web rule (see brokers.Set): a web service URL that discovery names becomes an admin
// upstream, which is sent the proxy's own credentials, only on its broker's own host and on a
// port of broker.allowedWebPorts. One test per source, each through the provider as the proxy
// runs it and the set as build.go makes it (the config defaults: 6650/6651 and 8080/8443).

// webCase is one broker entry: its binary URL, the web URL the entry names, and the web URL
// the set may use ("" when it must refuse it).
type webCase struct {
	name, pulsar, web, want string
}

// metadata is the cloud instance metadata address, the classic target of a steered request.
const metadata = "169.254.169.254"

func webRuleSet(d brokers.Discovery, webTLS bool, log *bytes.Buffer) *brokers.Set {
	return brokers.NewSet(d, brokers.Options{AllowedPorts: []string{"6650", "6651"}, AllowedWebPorts: []string{"8080", "8443"},
		WebTLS: webTLS, Logger: zerolog.New(log)})
}

// checkWebRule checks that every entry's binary endpoint is live, that WebURLs is exactly the
// accepted web URLs, that AllowWeb (redirects) refuses every refused one as the admin proxy
// would ask for it, and that each refusal was warned about exactly once, however often the set
// is asked.
func checkWebRule(t *testing.T, set *brokers.Set, log *bytes.Buffer, cases []webCase) {
	t.Helper()
	var want []string
	for range 3 {
		set.WebURLs()
	}
	live := set.Brokers()
	for _, c := range cases {
		b, err := brokers.ParseURL(c.pulsar)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(live, func(l brokers.Broker) bool { return l.Addr() == b.Addr() }) {
			t.Errorf("%s: broker %s left out of the live set; only its web URL is in question", c.name, c.pulsar)
		}
		if c.want != "" {
			want = append(want, c.want)
			continue
		}
		if n := strings.Count(log.String(), fmt.Sprintf(`{"level":"warn","broker":%q`, b.URL)); n != 1 {
			t.Errorf("%s: %d warnings about broker %s, want 1", c.name, n, b.URL)
		}
		u, err := url.Parse(c.web)
		if err != nil || u.Port() == "" {
			continue // the admin proxy refuses a Location like this before it asks the set
		}
		if set.AllowWeb(u.Scheme, u.Hostname(), u.Port()) {
			t.Errorf("%s: AllowWeb allows a redirect to %s", c.name, c.web)
		}
	}
	got := set.WebURLs()
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("WebURLs = %q, want %q", got, want)
	}
	for _, port := range []string{"80", "8080", "8443"} {
		if set.AllowWeb("http", metadata, port) {
			t.Errorf("AllowWeb allows http://%s:%s", metadata, port)
		}
	}
}

// zkWebSet runs the ZooKeeper provider over a fake ZooKeeper holding one registration per
// case, with the given web URL field, and returns the set over it once it has read them.
func zkWebSet(t *testing.T, cfg ZooKeeperConfig, cases []webCase, reg func(c webCase) string) (*brokers.Set, *bytes.Buffer) {
	t.Helper()
	z, f, _ := startFakeZK(t, cfg)
	for i, c := range cases {
		f.put(fmt.Sprintf("b%d:8080", i), []byte(reg(c)))
	}
	f.setState(zk.StateHasSession)
	wait.Within(5*time.Second, func() bool { return len(z.Brokers()) >= len(cases) })
	var log bytes.Buffer
	return webRuleSet(z, cfg.BrokerTLS, &log), &log
}

func TestWebRuleZooKeeper(t *testing.T) {
	cases := []webCase{
		{"its own host", "pulsar://b0.pulsar:6650", "http://b0.pulsar:8080", "http://b0.pulsar:8080"},
		{"upper case, trailing slash", "pulsar://b1.pulsar:6650", "HTTP://B1.Pulsar:8080/", "http://b1.pulsar:8080"},
		{"IPv6 in brackets, upper case", "pulsar://[fd00::1]:6650", "http://[FD00::1]:8443", "http://[fd00::1]:8443"},
		{"metadata address", "pulsar://b2.pulsar:6650", "http://" + metadata + ":80", ""},
		{"metadata address on an allowed port", "pulsar://b3.pulsar:6650", "http://" + metadata + ":8080", ""},
		{"metadata address as the broker too", "pulsar://" + metadata + ":6650", "http://" + metadata + ":80", ""},
		{"another host", "pulsar://b4.pulsar:6650", "http://evil.example:8080", ""},
		{"its own host on another port", "pulsar://b5.pulsar:6650", "http://b5.pulsar:22", ""},
		{"trailing dot", "pulsar://b6.pulsar:6650", "http://b6.pulsar.:8080", ""},
		{"IPv4-mapped IPv6 of its address", "pulsar://10.0.0.7:6650", "http://[::ffff:10.0.0.7]:8080", ""},
		{"IPv4 of its IPv4-mapped address", "pulsar://[::ffff:a9fe:a9fe]:6650", "http://" + metadata + ":8080", ""},
		{"IPv6 spelled otherwise", "pulsar://[fd00::2]:6650", "http://[fd00:0:0::2]:8080", ""},
		{"decimal IPv4", "pulsar://b8.pulsar:6650", "http://2852039166:8080", ""},
		{"decimal IPv4, implied port", "pulsar://b9.pulsar:6650", "http://2852039166/", ""},
		{"octal IPv4", "pulsar://b10.pulsar:6650", "http://0251.0376.0251.0376:8080", ""},
		{"hex IPv4", "pulsar://b11.pulsar:6650", "http://0xa9fea9fe:8080", ""},
		{"short IPv4", "pulsar://b12.pulsar:6650", "http://169.254.43518:8080", ""},
		{"user info", "pulsar://b13.pulsar:6650", "http://b13.pulsar@" + metadata + ":8080", ""},
		{"implied port", "pulsar://b14.pulsar:6650", "http://b14.pulsar", ""},
		{"https with broker TLS off", "pulsar://b15.pulsar:6650", "https://b15.pulsar:8443", ""},
		{"another scheme", "pulsar://b16.pulsar:6650", "ftp://b16.pulsar:8080", ""},
	}
	set, log := zkWebSet(t, ZooKeeperConfig{}, cases, func(c webCase) string {
		return fmt.Sprintf(`{"pulsarServiceUrl":%q,"webServiceUrl":%q}`, c.pulsar, c.web)
	})
	checkWebRule(t, set, log, cases)
	if t.Failed() {
		t.Logf("warnings:\n%s", log)
	}
}

// With broker TLS the TLS fields are read; an http:// one would send the credentials in clear.
func TestWebRuleZooKeeperTLS(t *testing.T) {
	cases := []webCase{
		{"https", "pulsar+ssl://b0.pulsar:6651", "https://b0.pulsar:8443", "https://b0.pulsar:8443"},
		{"http", "pulsar+ssl://b1.pulsar:6651", "http://b1.pulsar:8080", ""},
		{"metadata address", "pulsar+ssl://b2.pulsar:6651", "https://" + metadata + ":443", ""},
	}
	set, log := zkWebSet(t, ZooKeeperConfig{BrokerTLS: true}, cases, func(c webCase) string {
		return fmt.Sprintf(`{"pulsarServiceUrlTls":%q,"webServiceUrlTls":%q,"webServiceUrl":"http://%s:80"}`, c.pulsar, c.web, metadata)
	})
	checkWebRule(t, set, log, cases)
}

// With an advertised listener the web URL may be on the listener's host or on the host of
// the registration's own pulsarServiceUrl, and nowhere else.
func TestWebRuleZooKeeperListener(t *testing.T) {
	cases := []webCase{
		{"default address", "pulsar://b0.internal:6650", "http://b0.pulsar:8080", "http://b0.pulsar:8080"},
		{"listener's host", "pulsar://b1.internal:6650", "http://b1.internal:8080", "http://b1.internal:8080"},
		{"another host", "pulsar://b2.internal:6650", "http://" + metadata + ":8080", ""},
	}
	set, log := zkWebSet(t, ZooKeeperConfig{Listener: "internal"}, cases, func(c webCase) string {
		b, _ := brokers.ParseURL(c.pulsar)
		return fmt.Sprintf(`{"pulsarServiceUrl":"pulsar://%s:6650","webServiceUrl":%q,"advertisedListeners":{"internal":{"brokerServiceUrl":%q}}}`,
			strings.TrimSuffix(b.Host, ".internal")+".pulsar", c.web, c.pulsar)
	})
	checkWebRule(t, set, log, cases)
}

// Consul names only the web port (the host is the service's): the port rule is what holds.
func TestWebRuleConsul(t *testing.T) {
	fc := newFakeConsul()
	fc.set(
		instance("b0", "10.0.0.1", 6650, map[string]string{webPortMeta: "8080"}),
		instance("b1", metadata, 6650, map[string]string{webPortMeta: "80"}),
		instance("b2", "10.0.0.3", 80, map[string]string{pulsarPortMeta: "6650"}), // registered on "its web port"
		instance("b3", "10.0.0.4", 6650, map[string]string{webPortMeta: "22"}),
		instance("b4", "B4.Pulsar", 6651, map[string]string{webPortMeta: "8443"}),
	)
	srv := httptest.NewServer(fc)
	defer srv.Close()
	c, err := NewConsul(ConsulConfig{Service: "brokers", Address: srv.Listener.Addr().String(), WaitTime: time.Minute}, zerolog.Nop(), NewMetrics(nil))
	if err != nil {
		t.Fatal(err)
	}
	runProvider(t, c)
	waitBrokers(t, c, "pulsar://10.0.0.1:6650", "pulsar://"+metadata+":6650", "pulsar://10.0.0.3:6650", "pulsar://10.0.0.4:6650", "pulsar://B4.Pulsar:6651")
	var log bytes.Buffer
	checkWebRule(t, webRuleSet(c, false, &log), &log, []webCase{
		{"web_port 8080", "pulsar://10.0.0.1:6650", "http://10.0.0.1:8080", "http://10.0.0.1:8080"},
		{"web_port 80", "pulsar://" + metadata + ":6650", "http://" + metadata + ":80", ""},
		{"service on port 80", "pulsar://10.0.0.3:6650", "http://10.0.0.3:80", ""},
		{"web_port 22", "pulsar://10.0.0.4:6650", "http://10.0.0.4:22", ""},
		{"upper-case address", "pulsar://B4.Pulsar:6651", "http://b4.pulsar:8443", "http://b4.pulsar:8443"},
	})
}

// DNS names the web port in configuration (validated at load); the set holds to it anyway.
func TestWebRuleDNS(t *testing.T) {
	srv := startDNSServer(t)
	srv.set(dns.TypeA, "b.example. 30 IN A 10.0.0.1")
	srv.set(dns.TypeSRV, "_pulsar._tcp.b.example. 30 IN SRV 0 0 6650 B0.Example.")
	for _, tc := range []struct {
		srv     bool
		webPort int
		cases   []webCase
	}{
		{false, 9090, []webCase{{"A, web port not allowed", "pulsar://10.0.0.1:6650", "http://10.0.0.1:9090", ""}}},
		{false, 80, []webCase{{"A, port 80", "pulsar://10.0.0.1:6650", "http://10.0.0.1:80", ""}}},
		{false, 8080, []webCase{{"A, allowed", "pulsar://10.0.0.1:6650", "http://10.0.0.1:8080", "http://10.0.0.1:8080"}}},
		{true, 8080, []webCase{{"SRV target as its host", "pulsar://b0.example:6650", "http://b0.example:8080", "http://b0.example:8080"}}},
	} {
		name := "b.example"
		if tc.srv {
			name = "_pulsar._tcp.b.example"
		}
		d, err := NewDNS(DNSConfig{Name: name, SRV: tc.srv, Port: 6650, WebPort: tc.webPort, Server: srv.addr, Interval: time.Hour}, zerolog.Nop(), NewMetrics(nil))
		if err != nil {
			t.Fatal(err)
		}
		runProvider(t, d)
		waitBrokers(t, d, tc.cases[0].pulsar)
		var log bytes.Buffer
		checkWebRule(t, webRuleSet(d, false, &log), &log, tc.cases)
	}
}

// The operator wrote static web URLs: another host than the broker's is theirs to choose, but
// the port rule holds (config validation refuses such a file; this is the set's own check).
func TestWebRuleStatic(t *testing.T) {
	cases := []webCase{
		{"another host the operator chose", "pulsar://b0:6650", "http://b0-web.pulsar:8080", "http://b0-web.pulsar:8080"},
		{"metadata address on port 80", "pulsar://b1:6650", "http://" + metadata + ":80", ""},
		{"a port not allowed", "pulsar://b2:6650", "http://b2:9090", ""},
	}
	var urls, webs []string
	for _, c := range cases {
		urls, webs = append(urls, c.pulsar), append(webs, c.web)
	}
	s, err := NewStaticWeb(urls, webs)
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	checkWebRule(t, webRuleSet(s, false, &log), &log, cases)
}
