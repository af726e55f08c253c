//go:build linux

package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// pinSelf pins every thread of this process to cpu with sched_setaffinity(2) and sets
// GOMAXPROCS to 1. Threads the runtime starts later are cloned from pinned ones and inherit
// the mask; the loop runs twice for a thread cloned while the first pass ran.
func pinSelf(cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	for range 2 {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return err
		}
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil {
				continue
			}
			if err := unix.SchedSetaffinity(tid, &set); err != nil && err != unix.ESRCH {
				return fmt.Errorf("sched_setaffinity thread %d to CPU %d: %w", tid, cpu, err)
			}
		}
	}
	runtime.GOMAXPROCS(1)
	return nil
}

// checkPinning: the machine has the two CPUs and the taskset the proxy bench pins to.
func checkPinning(proxyCPU, loadCPU int) error {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return err
	}
	if !set.IsSet(proxyCPU) || !set.IsSet(loadCPU) || proxyCPU == loadCPU {
		return fmt.Errorf("CPUs %d (proxy) and %d (load) must be two CPUs this process may run on (mask has %d)", proxyCPU, loadCPU, set.Count())
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		return fmt.Errorf("taskset (util-linux) pins the proxies: %w", err)
	}
	return nil
}

// pacer wakes a sender at a fixed interval with a timerfd, which the Go poller waits on:
// time.Sleep on an idle Go scheduler sleeps about a millisecond at least, too coarse to pace
// a rate of a hundred thousand messages a second without bursts.
type pacer struct {
	f   *os.File
	buf [8]byte
}

func newPacer(interval time.Duration) (*pacer, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("timerfd_create: %w", err)
	}
	ts := unix.NsecToTimespec(int64(interval))
	if err := unix.TimerfdSettime(fd, 0, &unix.ItimerSpec{Interval: ts, Value: ts}, nil); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("timerfd_settime: %w", err)
	}
	return &pacer{f: os.NewFile(uintptr(fd), "pacer")}, nil
}

// wait blocks until the next tick (at once if one passed since the last wait).
func (p *pacer) wait() error {
	_, err := p.ticks()
	return err
}

// ticks is wait that also returns how many ticks passed since the last wait (more than one
// when the caller was late).
func (p *pacer) ticks() (uint64, error) {
	if _, err := io.ReadFull(p.f, p.buf[:]); err != nil {
		return 0, err
	}
	return binary.NativeEndian.Uint64(p.buf[:]), nil
}

func (p *pacer) close() { p.f.Close() }

// openFiles is the number of descriptors process pid holds.
func openFiles(pid int) int {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return -1
	}
	return len(fds)
}

// loadavg is /proc/loadavg's first three fields.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	var a, b1, c string
	fmt.Sscan(string(b), &a, &b1, &c)
	return a + " " + b1 + " " + c
}

func descriptorLimit() int {
	var l unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &l) != nil {
		return 1024
	}
	if l.Cur < l.Max {
		l.Cur = l.Max
		if unix.Setrlimit(unix.RLIMIT_NOFILE, &l) != nil {
			unix.Getrlimit(unix.RLIMIT_NOFILE, &l)
		}
	}
	return int(l.Cur)
}

// cpuTimes is one CPU's line of /proc/stat: busy (user, nice, system, irq, softirq), stolen
// (by the hypervisor) and total clock ticks so far.
type cpuTimes struct{ busy, steal, total float64 }

// readCPUTimes returns the ticks of cpu0, cpu1, ... from /proc/stat.
func readCPUTimes() map[int]cpuTimes {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return nil
	}
	out := map[int]cpuTimes{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || !strings.HasPrefix(f[0], "cpu") || f[0] == "cpu" {
			continue
		}
		n, err := strconv.Atoi(f[0][3:])
		if err != nil {
			continue
		}
		var t cpuTimes
		for i, v := range f[1:] {
			x, _ := strconv.ParseFloat(v, 64)
			if i >= 8 { // guest time is counted in user already
				break
			}
			t.total += x
			switch i {
			case 3, 4: // idle, iowait
			case 7:
				t.steal += x
			default:
				t.busy += x
			}
		}
		out[n] = t
	}
	return out
}

// busyPercent is how much of the time between a and b the CPU was busy, with anything, or
// taken by the hypervisor (steal).
func busyPercent(a, b map[int]cpuTimes, cpu int) float64 {
	x, y := a[cpu], b[cpu]
	if y.total <= x.total {
		return 0
	}
	return 100 * (y.busy + y.steal - x.busy - x.steal) / (y.total - x.total)
}

// stealPercent is the part of busyPercent the hypervisor took.
func stealPercent(a, b map[int]cpuTimes, cpu int) float64 {
	x, y := a[cpu], b[cpu]
	if y.total <= x.total {
		return 0
	}
	return 100 * (y.steal - x.steal) / (y.total - x.total)
}
