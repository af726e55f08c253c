package e2efault

import (
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// loadRate is each flow's messages per second in the fault tests: 200, or
// E2EFAULT_RATE (make test-fault-long: 1,000 per flow, 2,000 in all).
var loadRate = envInt("E2EFAULT_RATE", 200)

// afterRecovery is how long the load goes on once the flows have recovered: 3 s, or
// E2EFAULT_AFTER_RECOVERY seconds (make test-fault-long: 60).
var afterRecovery = time.Duration(envInt("E2EFAULT_AFTER_RECOVERY", 3)) * time.Second

// retry is how often the broker fault tests' clients retry, steadily, so that a recovery time
// says when the cluster and the path were ready, not where the client's doubling backoff
// (100 ms to 60 s) happened to be: 250 ms, or E2EFAULT_RETRY_MS (0: the client's backoff).
var retry = time.Duration(envIntOr0("E2EFAULT_RETRY_MS", 250)) * time.Millisecond

func envIntOr0(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n >= 0 {
		return n
	}
	return def
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// TestBrokerKilledUnderLoad kills the broker that owns two topics with SIGKILL while each has a
// producer and a consumer at loadRate, one pair through the proxy and one connected
// directly (a service URL naming both brokers), so both see the same crash; all clients retry
// every 250 ms (see retry). Both recover once
// the crashed broker's ZooKeeper session expires and its bundles move to the other broker;
// every acknowledged message arrives. The longest time without an acknowledgement after the
// kill is each path's recovery time.
func TestBrokerKilledUnderLoad(t *testing.T) {
	const victim = 2
	restartBrokerAtEnd(t, victim)
	proxy := startProxy(t, "")
	proxied := startFlow(t, "proxied", newClient(t, proxy.PulsarURL, 0), placedTopic(t, "kill-proxied", victim), loadRate, retry)
	direct := startFlow(t, "direct", newClient(t, directURL(), 0), placedTopic(t, "kill-direct", victim), loadRate, retry)
	flows := []*flow{proxied, direct}

	waitRunning(t, flows...)
	killed := time.Now()
	if err := theRig.KillBroker(testCtx(t), victim); err != nil {
		t.Fatal(err)
	}
	recovered := waitRecovered(flows, killed, 90*time.Second)
	time.Sleep(afterRecovery)
	for _, f := range flows {
		r := f.finish(t, killed)
		t.Logf("%s: %v", f.name, r)
		t.Logf("RESULT broker SIGKILL, %s: recovery (longest gap without an ack after the kill) %s", f.name, r.ackGap.Round(10*time.Millisecond))
		checkNoLoss(t, f, r)
	}
	if !recovered {
		t.Fatal("the flows did not recover within 90 s of the kill")
	}
}

// TestBrokerFrozenUnderLoad freezes the owning broker with SIGSTOP: its sockets stay open and
// silent, a half-open connection that only keep-alive detects (the clients ping every 2 s
// here). The clients give up on it, the frozen broker's ZooKeeper session expires, its
// bundles move, and the flows continue on the other broker. Then the broker is resumed
// (SIGCONT); every acknowledged message arrives.
func TestBrokerFrozenUnderLoad(t *testing.T) {
	const victim = 2
	restartBrokerAtEnd(t, victim)
	proxy := startProxy(t, "")
	proxied := startFlow(t, "proxied", newClient(t, proxy.PulsarURL, 2*time.Second), placedTopic(t, "freeze-proxied", victim), loadRate, retry)
	direct := startFlow(t, "direct", newClient(t, directURL(), 2*time.Second), placedTopic(t, "freeze-direct", victim), loadRate, retry)
	flows := []*flow{proxied, direct}

	waitRunning(t, flows...)
	frozen := time.Now()
	if err := theRig.SignalBroker(victim, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	recovered := waitRecovered(flows, frozen, 90*time.Second)
	if err := theRig.SignalBroker(victim, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	t.Logf("broker %d resumed after %s frozen", victim, time.Since(frozen).Round(100*time.Millisecond))
	time.Sleep(afterRecovery + 2*time.Second) // load while the resumed broker finds its session gone
	for _, f := range flows {
		r := f.finish(t, frozen)
		t.Logf("%s: %v", f.name, r)
		t.Logf("RESULT broker SIGSTOP, %s: recovery (longest gap without an ack after the freeze) %s", f.name, r.ackGap.Round(10*time.Millisecond))
		checkNoLoss(t, f, r)
	}
	if !recovered {
		t.Fatal("the flows did not recover within 90 s of the freeze")
	}
}
