//go:build linux

package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"sort"
	"strings"
	"time"
)

// The machine's floor under any proxy's added latency: a TCP echo of one message, the echo
// server on the proxy's CPU and then on the load's. A proxy on its own CPU puts that crossing
// into every round trip twice (client to proxy to speaker, and back), which the direct path,
// generator and speaker on one CPU, never makes. On a virtual machine the crossing is an
// inter-processor interrupt through the hypervisor, and it can cost more than a proxy's work.

// echoFloor is the echo's round trip, in µs, with the server on one CPU.
type echoFloor struct {
	ServerCPU int  `json:"serverCpu"`
	CrossCPU  bool `json:"crossCpu"` // the server on the proxy's CPU, the client on the load's
	Bytes     int  `json:"bytes"`
	Samples   int  `json:"samples"`
	// Ticks of the pacer over the measured time: an echo slower than a tick takes the place
	// of the ones it delayed (Samples < Ticks), so the tail is, if anything, understated.
	Ticks int     `json:"ticks"`
	P50   float64 `json:"p50Micros"`
	P99   float64 `json:"p99Micros"`
	P999  float64 `json:"p999Micros"`
}

// echoServerEnv set to 1 makes this binary (or the package's test binary) the echo server.
const echoServerEnv = "PULSAR_PROXY_BENCH_ECHO_SERVER"

// serveEcho prints its address and echoes every connection until stdin closes (its parent
// is gone).
func serveEcho() error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Println(l.Addr())
	go func() {
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			io.Copy(c, c)
		}()
	}
}

// measureEchoFloor runs this binary as the echo server pinned to serverCPU (-1: not pinned)
// and echoes one message of size bytes every tick for d from this process, which the caller
// pinned (cross: to the other CPU).
func measureEchoFloor(serverCPU int, cross bool, size int, tick, d time.Duration) (echoFloor, error) {
	ef := echoFloor{ServerCPU: serverCPU, CrossCPU: cross, Bytes: size}
	addr, stop, err := startEchoServer(serverCPU)
	if err != nil {
		return ef, err
	}
	defer stop()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return ef, err
	}
	defer c.Close()
	pace, err := newPacer(tick)
	if err != nil {
		return ef, err
	}
	defer pace.close()
	lat, ticks, err := echoes(c, pace, size, d)
	ef.Ticks = ticks
	if err != nil {
		return ef, err
	}
	if len(lat) == 0 {
		return ef, errors.New("no echo measured")
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	ef.Samples, ef.P50, ef.P99, ef.P999 = len(lat), micros(lat, 0.50), micros(lat, 0.99), micros(lat, 0.999)
	return ef, nil
}

// startEchoServer runs this binary as the echo server pinned to cpu (-1: not pinned) and
// returns its address, and stop, which ends it.
func startEchoServer(cpu int) (addr string, stop func(), err error) {
	self, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	server := exec.Command(self)
	server.Env = append(os.Environ(), echoServerEnv+"=1")
	cmd := pinned(server, cpu)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop = func() {
		stdin.Close() // the server exits on its end of stdin; killed if it does not
		kill := time.AfterFunc(2*time.Second, func() { cmd.Process.Kill() })
		cmd.Wait()
		kill.Stop()
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		stop()
		return "", nil, fmt.Errorf("echo server: %w", err)
	}
	return strings.TrimSpace(line), stop, nil
}

// echoes echoes one message of size bytes over c at every tick of pace, for a quarter of d to
// warm up and then d, and returns the round trips after the warm-up and the ticks they took.
func echoes(c net.Conn, pace *pacer, size int, d time.Duration) (lat []time.Duration, ticks int, err error) {
	msg, back := make([]byte, size), make([]byte, size)
	warmEnd := time.Now().Add(d / 4)
	for end := warmEnd.Add(d); time.Now().Before(end); {
		k, err := pace.ticks()
		if err != nil {
			return lat, ticks, err
		}
		t := time.Now()
		if t.After(warmEnd) {
			ticks += int(k)
		}
		if _, err := c.Write(msg); err != nil {
			return lat, ticks, err
		}
		if _, err := io.ReadFull(c, back); err != nil {
			return lat, ticks, err
		}
		if t.After(warmEnd) {
			lat = append(lat, time.Since(t))
		}
	}
	return lat, ticks, nil
}
