package e2efault

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
)

// A test that needs a real client it can freeze runs it in a child process: this test binary
// again, with envChild naming the part to play. SIGSTOP then stops all of it, its reads from
// the socket included, as a stuck client host would.
const envChild = "E2EFAULT_CHILD"

// runChild plays the part envChild names and exits; it returns false in the test process.
func runChild() bool {
	switch os.Getenv(envChild) {
	case "":
		return false
	case "consumer":
		if err := childConsumer(os.Getenv("E2EFAULT_URL"), os.Getenv("E2EFAULT_TOPIC"), os.Getenv("E2EFAULT_QUEUE")); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	fmt.Println("error: unknown child", os.Getenv(envChild))
	os.Exit(2)
	return true
}

// childConsumer subscribes with a receiver queue of queue messages, says "ready", and
// consumes until it is killed.
func childConsumer(url, topic, queue string) error {
	q, err := strconv.Atoi(queue)
	if err != nil {
		return err
	}
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: url, OperationTimeout: 60 * time.Second, Logger: plog.DefaultNopLogger()})
	if err != nil {
		return err
	}
	cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "stuck", ReceiverQueueSize: q,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		return err
	}
	fmt.Println("ready")
	for {
		m, err := cons.Receive(context.Background())
		if err != nil {
			return err
		}
		cons.Ack(m)
	}
}

// startChildConsumer runs childConsumer in a child process and waits until it has
// subscribed; the child is killed when the test ends.
func startChildConsumer(t *testing.T, url, topic string, queue int) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"=consumer", "E2EFAULT_URL="+url, "E2EFAULT_TOPIC="+topic,
		"E2EFAULT_QUEUE="+strconv.Itoa(queue))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("child consumer: %q, %v", line, err)
	}
	return cmd
}
