package connlimit

import (
	"net"
	"net/netip"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func tcpAddr(s string) net.Addr { return net.TCPAddrFromAddrPort(netip.MustParseAddrPort(s)) }

func TestPerIPLimitPerAddress(t *testing.T) {
	gauge := prometheus.NewGauge(prometheus.GaugeOpts{Name: "ips"})
	ips := NewPerIP(2, 64, gauge)
	mustAcquire := func(addr string) func() {
		t.Helper()
		release, ok := ips.Acquire(tcpAddr(addr))
		if !ok {
			t.Fatalf("%s refused", addr)
		}
		return release
	}
	mustRefuse := func(addr string) {
		t.Helper()
		if _, ok := ips.Acquire(tcpAddr(addr)); ok {
			t.Fatalf("%s accepted over the limit", addr)
		}
	}

	a1, a2 := mustAcquire("203.0.113.7:1"), mustAcquire("203.0.113.7:2")
	mustRefuse("203.0.113.7:3")
	mustRefuse("[::ffff:203.0.113.7]:4") // the same client, IPv4-mapped
	b := mustAcquire("203.0.113.8:1")    // another IP has its own count
	if got := testutil.ToFloat64(gauge); got != 2 {
		t.Fatalf("distinct IPs gauge %v, want 2", got)
	}

	a1()
	a3 := mustAcquire("203.0.113.7:5") // a released slot is free again
	mustRefuse("203.0.113.7:6")

	a2()
	a3()
	b()
	if len(ips.count) != 0 || testutil.ToFloat64(gauge) != 0 {
		t.Fatalf("after every release: %d IPs held, gauge %v", len(ips.count), testutil.ToFloat64(gauge))
	}
}

func TestPerIPUnlimitedAndAddressesWithoutIP(t *testing.T) {
	gauge := prometheus.NewGauge(prometheus.GaugeOpts{Name: "ips"})
	ips := NewPerIP(0, 64, gauge)
	var releases []func()
	for range 100 {
		release, ok := ips.Acquire(tcpAddr("203.0.113.7:1"))
		if !ok {
			t.Fatal("refused without a limit")
		}
		releases = append(releases, release)
	}
	if _, ok := ips.Acquire(&net.UnixAddr{Name: "@x", Net: "unix"}); !ok {
		t.Fatal("an address without an IP was refused")
	}
	for _, r := range releases {
		r()
	}
	if len(ips.count) != 0 || testutil.ToFloat64(gauge) != 0 {
		t.Fatalf("after every release: %d IPs held, gauge %v", len(ips.count), testutil.ToFloat64(gauge))
	}
}

func TestKeyByPrefixLength(t *testing.T) {
	for _, tc := range []struct {
		addr   string
		prefix int
		want   string
	}{
		{"203.0.113.7:1", 64, "203.0.113.7"},
		{"[::ffff:203.0.113.7]:1", 64, "203.0.113.7"}, // IPv4-mapped is IPv4
		{"[2001:db8:1:2:3:4:5:6]:1", 64, "2001:db8:1:2::"},
		{"[2001:db8:1:2:3:4:5:6]:1", 48, "2001:db8:1::"},
		{"[2001:db8:1:2:3:4:5:6]:1", 32, "2001:db8::"},
		{"[2001:db8:1:2:3:4:5:6]:1", 128, "2001:db8:1:2:3:4:5:6"},
		{"[fe80::1%eth0]:1", 64, "fe80::"},
	} {
		got, ok := Key(tcpAddr(tc.addr), tc.prefix)
		if !ok || got.String() != tc.want {
			t.Errorf("Key(%s, /%d) = %v %v, want %s", tc.addr, tc.prefix, got, ok, tc.want)
		}
	}
}

func TestPerIPCountIPv6PerPrefix(t *testing.T) {
	for _, tc := range []struct {
		prefix int
		second string // the first is 2001:db8:1:2::1
		shares bool
	}{
		{64, "[2001:db8:1:2:ffff::9]:1", true},
		{64, "[2001:db8:1:3::1]:1", false},
		{48, "[2001:db8:1:3::1]:1", true},
		{128, "[2001:db8:1:2::2]:1", false},
	} {
		gauge := prometheus.NewGauge(prometheus.GaugeOpts{Name: "ips"})
		ips := NewPerIP(1, tc.prefix, gauge)
		release, ok := ips.Acquire(tcpAddr("[2001:db8:1:2::1]:1"))
		if !ok {
			t.Fatalf("/%d: first refused", tc.prefix)
		}
		if _, ok := ips.Acquire(tcpAddr(tc.second)); ok == tc.shares {
			t.Errorf("/%d: %s accepted=%v, want %v", tc.prefix, tc.second, ok, !tc.shares)
		}
		rate := NewRate(0.001, 1, tc.prefix)
		rate.Allow(tcpAddr("[2001:db8:1:2::1]:1"))
		if ok := rate.Allow(tcpAddr(tc.second)); ok == tc.shares {
			t.Errorf("/%d: rate let %s through=%v, want %v", tc.prefix, tc.second, ok, !tc.shares)
		}
		release()
	}
}
