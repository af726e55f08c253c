package rig

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// keepInterval is how often KeepBrokers looks at the brokers; keepRetry is how long it waits
// after a restart that failed before it tries again.
const (
	keepInterval = 2 * time.Second
	keepRetry    = 30 * time.Second
)

// KeepBrokers restarts, until the returned stop is called, any broker that exits without
// having been stopped or killed through this Rig, as Kubernetes restarts a broker's pod.
// Pulsar's embedded Functions worker shuts its broker down on what it takes for a fatal
// error, such as a read of its assignment topic that times out while the other broker
// restarts; a test that stopped one broker then found neither. Each restart is told to logf.
func (r *Rig) KeepBrokers(logf func(format string, args ...any)) (stop func()) {
	k := &keeper{
		brokers: len(r.Brokers),
		alive:   r.brokerAlive,
		start: func(ctx context.Context, n int) error {
			return r.startBrokerScript(ctx, n)
		},
		lastLog: r.brokerLogHint,
		ops:     &r.brokerOps,
		wanted:  r.brokerWanted,
		logf:    logf,
		retry:   keepRetry,
	}
	return k.run(keepInterval)
}

// keeper is KeepBrokers' loop, apart from the rig so that a test can give it fakes.
type keeper struct {
	brokers int
	alive   func(n int) bool
	start   func(ctx context.Context, n int) error
	lastLog func(n int) string
	ops     *sync.Mutex // held by every start, stop and kill of a broker
	wanted  func(n int) bool
	logf    func(format string, args ...any)
	retry   time.Duration // the wait after a failed start
}

func (k *keeper) run(every time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		retryAt := make([]time.Time, k.brokers+1)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for n := 1; n <= k.brokers && ctx.Err() == nil; n++ {
				if time.Now().Before(retryAt[n]) {
					continue
				}
				if err := k.revive(ctx, n); err != nil {
					k.logf("rig: starting broker %d again failed (next try in %s): %v", n, k.retry, err)
					retryAt[n] = time.Now().Add(k.retry)
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}

// revive starts broker n again if it is wanted up and not running. The check and the start
// hold ops, so a broker a test is stopping is not taken for one that died.
func (k *keeper) revive(ctx context.Context, n int) error {
	k.ops.Lock()
	defer k.ops.Unlock()
	if !k.wanted(n) || k.alive(n) {
		return nil
	}
	k.logf("rig: broker %d exited without being stopped (%s); starting it again", n, k.lastLog(n))
	began := time.Now()
	if err := k.start(ctx, n); err != nil {
		return err
	}
	k.logf("rig: broker %d started again in %s", n, time.Since(began).Round(100*time.Millisecond))
	return nil
}

// brokerWanted reports whether broker n should be running: not stopped or killed through the
// Rig since it last started.
func (r *Rig) brokerWanted(n int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.brokerDown[n]
}

func (r *Rig) setBrokerDown(n int, down bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.brokerDown == nil {
		r.brokerDown = map[int]bool{}
	}
	r.brokerDown[n] = down
}

// brokerAlive reports whether broker n's recorded process runs and is this rig's, as rig.sh's
// pid_is_ours decides: a dead process's pid may have been given to another. Without /proc it
// cannot tell and says alive, so nothing is restarted on a guess.
func (r *Rig) brokerAlive(n int) bool {
	if err := r.reload(); err != nil {
		return true
	}
	pid, err := strconv.Atoi(r.State(fmt.Sprintf("BROKER%d_PID", n)))
	if err != nil || pid <= 0 {
		return false
	}
	if _, err := os.Stat("/proc/self"); err != nil {
		return true
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	return bytes.Contains(cmdline, []byte(r.Dir+"/")) || bytes.Contains(cmdline, []byte(r.Dir+"\x00"))
}

// brokerLogHint is the last line of broker n's log that tells why it stopped (Pulsar logs
// "Encountered fatal error. Shutting down." when its Functions worker gives up), for the
// restart's message.
func (r *Rig) brokerLogHint(n int) string {
	b, err := os.ReadFile(fmt.Sprintf("%s/logs/broker%d.log", r.Dir, n))
	if err != nil {
		return "no log: " + err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for i := len(lines) - 1; i >= 0 && i >= len(lines)-2000; i-- {
		if l := strings.ToLower(lines[i]); strings.Contains(l, "fatal") || strings.Contains(l, "shutting down") {
			return "its log: " + truncate(lines[i], 300)
		}
	}
	return "its log tells no reason: killed?"
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
