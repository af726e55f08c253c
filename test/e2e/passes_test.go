package e2e

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"
)

// EnvBothModes (E2E_BOTH_MODES=1) runs the package in one process, on one rig: every
// test but the disruptive ones, the direct-session tests again multiplexed, then the disruptive
// tests, so that no test runs on a rig still recovering from a ZooKeeper outage or a killed
// broker.
const EnvBothModes = "E2E_BOTH_MODES"

// EnvHalf (E2E_HALF=1 or 2, set by make test) splits that work between two processes, each
// with a rig of its own (test/run-e2e.sh runs them side by side, the second in a network
// namespace of its own): half 1 runs the direct tests but secondHalfTests; half 2 runs those,
// then the multiplexed pass, then the disruptive tests.
const EnvHalf = "E2E_HALF"

// disruptiveTests stop the rig's ZooKeeper or kill and restart its brokers; the brokers take a
// while to serve every bundle again afterwards.
const disruptiveTests = "^(TestRigBrokerRestart|TestWebSocketSurvivesUnloadAndRestart|TestDiscoveryMetadataStoreFollowsBrokers|TestDiscoveryMetadataStoreOutage)$"

// directSessionTests are the tests that exercise direct sessions with every client: Go, Java
// and Python clients, chunking, TLS on both sides, unload, drain, pattern consumers.
const directSessionTests = "^(TestGateway|TestDataPath|TestBrokerTLS|TestDrain|TestPython|TestTLS)"

// secondHalfTests are the long direct tests half 2 runs besides the multiplexed pass and the
// disruptive tests, so that the two halves take about the same time (about ten minutes each
// on a busy two-core machine).
const secondHalfTests = "^(TestClientFeatureMatrix|TestDashboardAndAlertsMatchTheProxy|TestWebSocketDifferential)$"

// A pass is one run of the package's tests: those run selects (all when run is "") and skip
// does not, with every proxy multiplexing when multiplex is set.
type pass struct {
	name, run, skip string
	multiplex       bool
}

var (
	directPass      = pass{name: "the direct tests", skip: disruptiveTests}
	multiplexedPass = pass{name: "the direct-session tests again with broker.multiplex on", run: directSessionTests, multiplex: true}
	disruptivePass  = pass{name: "the disruptive tests, last", run: disruptiveTests}
)

// passesFromEnv are the passes E2E_HALF or E2E_BOTH_MODES ask for; ok is false when neither is
// set, or when E2E_MULTIPLEX already runs every pass multiplexed.
func passesFromEnv() (passes []pass, ok bool) {
	if multiplexed() {
		return nil, false
	}
	switch half := os.Getenv(EnvHalf); half {
	case "1":
		return []pass{{name: "half 1: the direct tests", skip: disruptiveTests + "|" + secondHalfTests}}, true
	case "2":
		second := pass{name: "half 2: the long direct tests", run: secondHalfTests}
		return []pass{second, multiplexedPass, disruptivePass}, true
	case "":
	default:
		fmt.Fprintf(os.Stderr, "%s=%q: want 1 or 2; running every test once\n", EnvHalf, half)
		return nil, false
	}
	if os.Getenv(EnvBothModes) == "1" {
		return []pass{directPass, multiplexedPass, disruptivePass}, true
	}
	return nil, false
}

// runPasses runs the passes in order (testing.M.Run may run again; only the tests its -run and
// -skip patterns select do) and stops at the first that fails.
func runPasses(m *testing.M, passes []pass) int {
	for _, p := range passes {
		began := time.Now()
		fmt.Printf("== %s (run %q, skip %q)\n", p.name, p.run, p.skip)
		err := flag.Set("test.skip", p.skip)
		if p.run != "" { // a pass without its own keeps the -run given
			err = errors.Join(err, flag.Set("test.run", p.run))
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
			return 1
		}
		if p.multiplex {
			setMultiplexed()
		} else {
			setPerClient()
		}
		code := m.Run()
		fmt.Printf("== %s: exit %d in %s\n", p.name, code, time.Since(began).Round(time.Second))
		if code != 0 {
			return code
		}
	}
	return 0
}
