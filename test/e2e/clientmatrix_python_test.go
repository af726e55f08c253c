package e2e

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// patternPeriodProbe asks matrixclient.py's subscribe_pattern for a pattern consumer with a
// 1 s period, and pulsar-client's own subscribe for one with the same argument, on a client
// whose C++ side is a stand-in that records the configuration each consumer would get. It
// prints "matrix <period>", "plain <period>" and the configuration class in force afterwards.
const patternPeriodProbe = `
import sys
sys.path.insert(0, sys.argv[1])
import re
import _pulsar
import pulsar
import matrixclient

class Recorder:
    def subscribe_pattern(self, pattern, subscription, conf):
        self.period = conf.pattern_auto_discovery_period()
        return object()

def period(subscribe):
    client = pulsar.Client.__new__(pulsar.Client)
    client._client, client._consumers = Recorder(), []
    subscribe(client)
    return client._client.period

made = _pulsar.ConsumerConfiguration
print("matrix", period(lambda c: matrixclient.subscribe_pattern(c, "persistent://public/default/x-.*", 1)))
print("plain", period(lambda c: c.subscribe(re.compile("persistent://public/default/x-.*"), "s",
                                            pattern_auto_discovery_period=1)))
print("restored", _pulsar.ConsumerConfiguration is made)
`

// TestMatrixPythonPatternPeriod: the Python column's regex-polling cell subscribes with the
// 1 s polling period its row names. pulsar-client's subscribe drops
// pattern_auto_discovery_period, so the C++ client's default of 60 s applied: the cell was a
// race between the first poll, 60 s after subscribing, and the receive's 60 s timeout from
// the send a few hundred milliseconds later, lost in about one run of three through the
// proxy and directly alike.
func TestMatrixPythonPatternPeriod(t *testing.T) {
	py := needPython(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, py.Python, "-B", "-c", patternPeriodProbe, "testdata").CombinedOutput()
	if err != nil {
		t.Fatalf("the probe failed: %v\n%s", err, out)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok {
			got[k] = v
		}
	}
	if got["matrix"] != "1" {
		t.Errorf("matrixclient.py's pattern consumer polls every %q s, want 1 (output:\n%s)", got["matrix"], out)
	}
	if got["restored"] != "True" {
		t.Errorf("discovery_period left _pulsar.ConsumerConfiguration replaced (output:\n%s)", out)
	}
	if got["plain"] == "1" {
		t.Logf("pulsar-client's subscribe now passes pattern_auto_discovery_period on: matrixclient.py's discovery_period is no longer needed")
	}
}
