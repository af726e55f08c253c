package lookup

import (
	"testing"

	"github.com/rs/zerolog"
)

// BenchmarkBrokerSet measures the per-request cost of the live set: Allow runs once per
// direct session, Pick once per lookup.
func BenchmarkBrokerSet(b *testing.B) {
	static, _ := NewStatic([]string{"pulsar://10.0.0.1:6650", "pulsar://10.0.0.2:6650", "pulsar://10.0.0.3:6650"})
	src := newSource("consul", zerolog.Nop(), NewMetrics(nil))
	src.succeed(static.Brokers())
	set := NewBrokerSet(Union{static, src}, SetOptions{AllowedPorts: []string{"6650", "6651"}, Logger: zerolog.Nop()})
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
			if _, err := set.pick(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
