//go:build linux

package main

import (
	"testing"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/bench/speaker"
)

// The side-by-side load generator against the speaker (no broker): the producer gets its
// receipts, the consumer counts the speaker's messages in the measured interval, onMeasure
// brackets it, and a paced run ends as well as an unpaced one. The measured second is long
// enough that a starved consumer on a loaded machine still counts some messages.
func TestSideBySideLoadAgainstSpeaker(t *testing.T) {
	sp, err := speaker.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	for _, rate := range []float64{0, 2000} {
		var calls []bool
		l := load{ep: endpoint{addr: sp.Addr()}, topic: speaker.Topic(benchNamespace, 1<<10, 1, 0), size: 1 << 10, rate: rate,
			warmup: 100 * time.Millisecond, measure: time.Second, onMeasure: func(start bool) { calls = append(calls, start) }}
		res, err := l.run()
		if err != nil {
			t.Fatalf("rate %.0f: %v", rate, err)
		}
		if res.Messages <= 0 || res.Bytes != res.Messages<<10 || res.Seconds != l.measure.Seconds() {
			t.Errorf("rate %.0f: %d messages, %d bytes in %.2f s", rate, res.Messages, res.Bytes, res.Seconds)
		}
		if len(calls) != 2 || !calls[0] || calls[1] {
			t.Errorf("rate %.0f: onMeasure called with %v, want [true false]", rate, calls)
		}
	}
}
