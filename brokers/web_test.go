package brokers

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

func TestWebURLsAndAllowWeb(t *testing.T) {
	d := &listDiscovery{}
	d.bs = []Broker{
		{URL: "pulsar://b0:6650", Host: "b0", Port: "6650", Web: "http://b0:8080"},
		{URL: "pulsar://b1:6650", Host: "b1", Port: "6650", Web: "http://b1:8080"},
		{URL: "pulsar://b2:6650", Host: "b2", Port: "6650"}, // no web service known
	}
	set := NewSet(d, Options{AllowedPorts: []string{"6650"}, AllowedWebPorts: []string{"8080", "22"}, AllowedHosts: []string{"*.broker.svc"}, Logger: zerolog.Nop()})

	// Round robin over those with a web service; a broker that answered its probe comes first.
	seen := map[string]int{}
	for range 4 {
		urls := set.WebURLs()
		if len(urls) != 2 {
			t.Fatalf("WebURLs = %q", urls)
		}
		seen[urls[0]]++
	}
	if seen["http://b0:8080"] == 0 || seen["http://b1:8080"] == 0 {
		t.Errorf("no round robin: %v", seen)
	}
	set.ProbeAll(context.Background(), func(_ context.Context, addr string) error {
		if addr == "b1:6650" {
			return nil
		}
		return errors.New("down")
	}, time.Second)
	for range 3 {
		if urls := set.WebURLs(); urls[0] != "http://b1:8080" {
			t.Errorf("healthy broker not first: %q", urls)
		}
	}

	for _, tc := range []struct {
		scheme, host, port string
		want               bool
	}{
		{"http", "b0", "8080", true},
		{"HTTP", "B1", "8080", true},
		{"https", "b0", "8080", false}, // another scheme than discovery's
		{"http", "b0", "8081", false},  // another port
		{"http", "b2", "8080", false},  // a live broker without a known web service... on a known port: still no pattern
		{"http", "evil.example", "8080", false},
		{"http", "x.broker.svc", "8080", true}, // pattern, on a live web port
		{"http", "x.broker.svc", "22", false},  // a pattern never opens another port
		{"http", "a.x.broker.svc", "8080", false},
		{"ftp", "b0", "8080", false},
		{"http", "b0", "08080", false},
		{"http", "127.1", "8080", false},
	} {
		if got := set.AllowWeb(tc.scheme, tc.host, tc.port); got != tc.want {
			t.Errorf("AllowWeb(%s, %s, %s) = %v, want %v", tc.scheme, tc.host, tc.port, got, tc.want)
		}
	}
}

// A refusal is warned once per broker and reason: again only when the reason changes, and
// not for a web URL that passes.
func TestWebRuleWarnsOncePerBrokerAndReason(t *testing.T) {
	const metadata = "169.254.169.254" // the cloud instance metadata address
	d := &listDiscovery{}
	b := Broker{URL: "pulsar://b0:6650", Host: "b0", Port: "6650", Web: "http://" + metadata + ":80"}
	d.bs = []Broker{b}
	var log bytes.Buffer
	set := NewSet(d, Options{AllowedPorts: []string{"6650", "6651"}, AllowedWebPorts: []string{"8080", "8443"}, Logger: zerolog.New(&log)})
	warned := func() int { return strings.Count(log.String(), "will not send admin requests") }
	for range 5 {
		set.WebURLs()
		set.Allow("b0:6650")
	}
	d.mu.Lock()
	d.bs = []Broker{b, {URL: "pulsar://b1:6650", Host: "b1", Port: "6650", Web: "http://b1:8080"}}
	d.mu.Unlock()
	set.WebURLs()
	if n := warned(); n != 1 {
		t.Fatalf("%d warnings for one refused web URL, want 1:\n%s", n, &log)
	}
	b.Web = "http://b0:22"
	d.mu.Lock()
	d.bs = []Broker{b}
	d.mu.Unlock()
	set.WebURLs()
	if n := warned(); n != 2 || !strings.Contains(log.String(), "port 22 is not in broker.allowedWebPorts") {
		t.Fatalf("%d warnings after the reason changed, want 2:\n%s", n, &log)
	}
}
