package e2eauth

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"

	"github.com/pulsar-proxy/pulsar-proxy/test/metrics"
	"github.com/pulsar-proxy/pulsar-proxy/test/proxyproc"
	"github.com/pulsar-proxy/pulsar-proxy/test/rig"
)

type proxy struct {
	*proxyproc.Proc
	policyFile string
}

// startProxy runs the real proxy in front of the auth rig with authentication on, the proxy's
// own token, and policy as its authorization policy ("" = no policy at the proxy).
func startProxy(t *testing.T, policy string, extraAuth string) *proxy {
	t.Helper()
	return startProxyOn(t, brokers(), policy, extraAuth)
}

// startProxyOn is startProxy in front of the brokers of r. extraAuth goes at the end of the
// auth section; top-level sections (tls:) may follow it.
func startProxyOn(t *testing.T, r *rig.Rig, policy string, extraAuth string) *proxy {
	t.Helper()
	dir := t.TempDir()
	tokenFile := proxyTokenFile(t, dir)
	yaml := "auth:\n  enabled: true\n  token:\n    secretKeyFile: " + secretFile + "\n    leeway: 0s\n" +
		"  refreshTimeout: 5s\n  forwardClientCredentials: true\n  brokerClient:\n    tokenFile: " + tokenFile + "\n" + extraAuth
	p := &proxy{}
	if policy != "" {
		p.policyFile = filepath.Join(dir, "policy.yaml")
		if err := os.WriteFile(p.policyFile, []byte(policy), 0o600); err != nil {
			t.Fatal(err)
		}
		yaml += "authz:\n  enabled: true\n  policyFile: " + p.policyFile + "\n  reloadInterval: 1s\n"
	}
	p.Proc = runProxy(t, dir, r, yaml)
	if multiplexed() {
		// Before the proxy stops (cleanups run last first): how many shared broker
		// connections it opened, for TestAuthMultiplexed to check that the test used them.
		t.Cleanup(func() {
			s, err := metrics.Fetch(p.HTTPURL + "/metrics")
			if err == nil {
				var v float64
				if v, err = s.Value("pulsar_proxy_multiplex_dials_total", `result="ok"`); err == nil {
					muxDials += v
				}
			}
			if err != nil {
				t.Errorf("multiplexed broker connections opened: %v", err)
			}
		})
	}
	return p
}

// proxyTokenFile writes the proxy's own token (role proxy) into dir and returns its path.
func proxyTokenFile(t *testing.T, dir string) string {
	t.Helper()
	f := filepath.Join(dir, "proxy.token")
	if err := os.WriteFile(f, []byte(mustToken(proxyRole, 0)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// runProxy runs the real proxy with yaml in front of both brokers of r and stops it when the
// test ends (showing its log tail if the test failed).
func runProxy(t *testing.T, dir string, r *rig.Rig, yaml string) *proxyproc.Proc {
	t.Helper()
	return proxyproc.StartForTest(t, proxyBinary, dir, []string{r.BrokerURL(1), r.BrokerURL(2)}, yaml)
}

// metric reads a series that must be in the proxy's /metrics (a gauge, an unlabelled counter,
// or a labelled counter already seen incremented): a missing metric or series fails the test.
func (p *proxy) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	s, err := metrics.Fetch(p.HTTPURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	v, err := s.Value(name, labels...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// count reads a labelled counter whose series appears when first incremented: 0 until then.
// The counter and its label names must exist (metrics.Scrape.Count), so a renamed metric or
// label fails the test instead of reading 0.
func (p *proxy) count(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	s, err := metrics.Fetch(p.HTTPURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	v, err := s.Count(name, labels...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// client is a pulsar-client-go client of the proxy with the given authentication (nil: none).
func client(t *testing.T, url string, auth pulsar.Authentication) pulsar.Client {
	return clientWithTimeout(t, url, auth, 20*time.Second)
}

// clientWithTimeout bounds the client's retries (a refused client retries until then).
func clientWithTimeout(t *testing.T, url string, auth pulsar.Authentication, opTimeout time.Duration) pulsar.Client {
	t.Helper()
	return clientWith(t, pulsar.ClientOptions{URL: url, Authentication: auth}, opTimeout)
}

// clientWith creates a client with o, opTimeout and no logging, closed when the test ends.
func clientWith(t *testing.T, o pulsar.ClientOptions, opTimeout time.Duration) pulsar.Client {
	t.Helper()
	o.OperationTimeout, o.ConnectionTimeout, o.Logger = opTimeout, 10*time.Second, plog.DefaultNopLogger()
	c, err := pulsar.NewClient(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func tokenClient(t *testing.T, url, role string) pulsar.Client {
	return client(t, url, pulsar.NewAuthenticationToken(mustToken(role, 0)))
}

func uniqueTopic(ns, prefix string) string {
	return "persistent://" + ns + "/" + prefix + "-" + strings.ReplaceAll(time.Now().Format("150405.000000000"), ".", "")
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// produceConsume sends n messages as c and receives them all on a fresh subscription.
func produceConsume(t *testing.T, c pulsar.Client, topic string, n int) {
	t.Helper()
	ctx := ctxT(t, 2*time.Minute)
	cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	defer cons.Close()
	prod, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatalf("producer: %v", err)
	}
	defer prod.Close()
	for i := range n {
		prod.SendAsync(ctx, &pulsar.ProducerMessage{Payload: []byte{byte(i), byte(i >> 8)}}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			if err != nil {
				t.Errorf("send: %v", err)
			}
		})
	}
	if err := prod.Flush(); err != nil {
		t.Fatal(err)
	}
	seen := make([]bool, n)
	for range n {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		p := m.Payload()
		seen[int(p[0])|int(p[1])<<8] = true
		cons.Ack(m)
	}
	for i, ok := range seen {
		if !ok {
			t.Fatalf("message %d lost", i)
		}
	}
}
