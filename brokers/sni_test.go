package brokers

import (
	"context"
	"errors"
	"testing"

	"github.com/rs/zerolog"
)

func TestAllowSNI(t *testing.T) {
	d := &listDiscovery{}
	d.set(t, "pulsar+ssl://broker-0.pulsar.svc:6651", "pulsar+ssl://Broker-1.pulsar.svc:6651",
		"pulsar://plain.pulsar.svc:6651", "pulsar+ssl://10.0.0.7:6651",
		"pulsar+ssl://twin.pulsar.svc:6651", "pulsar+ssl://twin.pulsar.svc:6652")
	set := NewSet(d, Options{AllowedPorts: []string{"6651", "6652"}, SNIServiceNames: []string{"pulsar.example.com"}, Logger: zerolog.Nop()})
	for _, tc := range []struct {
		name, want string
		match      SNIMatch
		err        error
	}{
		{name: "broker-0.pulsar.svc", want: "broker-0.pulsar.svc:6651"},
		{name: "BROKER-0.Pulsar.SVC", want: "broker-0.pulsar.svc:6651"}, // DNS names are case-insensitive
		{name: "broker-1.pulsar.svc", want: "broker-1.pulsar.svc:6651"},
		{name: "pulsar.example.com", match: SNIService},
		{name: "broker-0.pulsar.svc.", err: ErrTargetNotAllowed}, // RFC 6066: no trailing dot
		{name: "evil.broker-0.pulsar.svc", err: ErrTargetNotAllowed},
		{name: "broker-0.pulsar.svc.evil.example", err: ErrTargetNotAllowed},
		{name: "broker-0.pulsar", err: ErrTargetNotAllowed},
		{name: "*.pulsar.svc", err: ErrTargetNotAllowed},
		{name: "plain.pulsar.svc", err: ErrTargetNotAllowed}, // not a TLS endpoint
		{name: "10.0.0.7", err: ErrTargetNotAllowed},         // an IP is no server name
		{name: "twin.pulsar.svc", err: ErrAmbiguousName},
		{name: "", err: ErrTargetNotAllowed},
		{name: "broker-0.pulsar.svc\x00", err: ErrTargetNotAllowed},
		{name: "bro\u212Aer-0.pulsar.svc", err: ErrTargetNotAllowed}, // the Kelvin sign lowers to k: not the broker's name
		{name: "localhost", err: ErrTargetNotAllowed},
		{name: "example.com", err: ErrTargetNotAllowed},
	} {
		b, match, err := set.AllowSNI(tc.name)
		switch {
		case tc.err != nil:
			if !errors.Is(err, tc.err) {
				t.Errorf("AllowSNI(%q) = %s, %v; want %v", tc.name, b.Addr(), err, tc.err)
			}
		case err != nil:
			t.Errorf("AllowSNI(%q): %v", tc.name, err)
		case match != tc.match:
			t.Errorf("AllowSNI(%q) matched as %s, want %s", tc.name, match, tc.match)
		case tc.match == SNIBroker && b.Addr() != tc.want:
			t.Errorf("AllowSNI(%q) = %s, want %s", tc.name, b.Addr(), tc.want)
		case tc.match == SNIService && !b.TLS:
			t.Errorf("AllowSNI(%q) picked %s, which is not a TLS endpoint", tc.name, b.URL)
		}
	}
}

// The service name goes to a broker that answered its probe, and only to TLS endpoints.
func TestAllowSNIServicePicksHealthyTLSBroker(t *testing.T) {
	d := &listDiscovery{}
	d.set(t, "pulsar+ssl://a.svc:6651", "pulsar+ssl://b.svc:6651")
	set := NewSet(d, Options{SNIServiceNames: []string{"pulsar.svc"}, Logger: zerolog.Nop()})
	set.ProbeAll(context.Background(), func(_ context.Context, addr string) error {
		if addr == "a.svc:6651" {
			return errors.New("down")
		}
		return nil
	}, 0)
	for range 4 {
		b, match, err := set.AllowSNI("pulsar.svc")
		if err != nil || match != SNIService || b.Host != "b.svc" {
			t.Fatalf("AllowSNI(service) = %s %s %v, want the healthy b.svc", b.Addr(), match, err)
		}
	}
	d.set(t, "pulsar://a.svc:6650")
	if _, _, err := set.AllowSNI("pulsar.svc"); !errors.Is(err, ErrNoBroker) {
		t.Fatalf("AllowSNI(service) without a TLS broker: %v, want ErrNoBroker", err)
	}
	d.set(t)
	if _, _, err := set.AllowSNI("pulsar.svc"); !errors.Is(err, ErrNoBroker) {
		t.Fatalf("AllowSNI(service) without brokers: %v, want ErrNoBroker", err)
	}
}

// A broker that leaves discovery stops being reachable by its name at once: no learned or
// remembered targets apply to server names.
func TestAllowSNIFollowsDiscovery(t *testing.T) {
	d := &listDiscovery{}
	d.set(t, "pulsar+ssl://a.svc:6651")
	set := NewSet(d, Options{LearnedTTL: 1 << 40, AllowedHosts: []string{"*.svc"}, Logger: zerolog.Nop()})
	if _, _, err := set.AllowSNI("a.svc"); err != nil {
		t.Fatal(err)
	}
	set.Learn("pulsar+ssl://c.svc:6651")
	d.set(t, "pulsar+ssl://b.svc:6651")
	for _, name := range []string{"a.svc", "c.svc"} {
		if _, _, err := set.AllowSNI(name); !errors.Is(err, ErrTargetNotAllowed) {
			t.Errorf("AllowSNI(%q) after it left discovery (or was only learned): %v, want refused", name, err)
		}
	}
}
