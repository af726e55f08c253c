package discovery

import (
	"testing"

	"github.com/rs/zerolog"

	"github.com/pulsar-proxy/pulsar-proxy/brokers"
)

// BenchmarkLiveSet measures the per-request cost of the live set: Allow runs once per
// direct session, Pick once per lookup.
func BenchmarkLiveSet(b *testing.B) {
	static, _ := NewStatic([]string{"pulsar://10.0.0.1:6650", "pulsar://10.0.0.2:6650", "pulsar://10.0.0.3:6650"})
	src := newSource("consul", zerolog.Nop(), NewMetrics(nil))
	src.succeed(static.Brokers())
	set := brokers.NewSet(Union{static, src}, brokers.Options{AllowedPorts: []string{"6650", "6651"}, Logger: zerolog.Nop()})
	b.Run("Allow", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := set.Allow("10.0.0.3:6650"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Pick", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := set.Pick(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
