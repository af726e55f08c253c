package upstream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/fakebroker"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/wait"
)

type nopWatcher struct{}

func (nopWatcher) Update(*pb.CommandWatchTopicUpdate) {}
func (nopWatcher) Lost(error)                         {}

// watchingBroker answers CONNECT, WATCH_TOPIC_LIST and WATCH_TOPIC_LIST_CLOSE.
func watchingBroker(t *testing.T) (addr string, open func() int) {
	b := fakebroker.Start(t, func(c net.Conn, cmd *pb.BaseCommand) {
		switch cmd.GetType() {
		case pb.BaseCommand_CONNECT:
			frame.WriteCommand(c, frame.Connected("fake", 21, 5<<20))
		case pb.BaseCommand_WATCH_TOPIC_LIST:
			w := cmd.GetWatchTopicList()
			frame.WriteCommand(c, &pb.BaseCommand{Type: pb.BaseCommand_WATCH_TOPIC_LIST_SUCCESS.Enum(),
				WatchTopicListSuccess: &pb.CommandWatchTopicListSuccess{RequestId: w.RequestId, WatcherId: w.WatcherId, TopicsHash: proto.String("0")}})
		case pb.BaseCommand_WATCH_TOPIC_LIST_CLOSE:
			frame.WriteCommand(c, &pb.BaseCommand{Type: pb.BaseCommand_SUCCESS.Enum(),
				Success: &pb.CommandSuccess{RequestId: cmd.GetWatchTopicListClose().RequestId}})
		}
	})
	return b.Addr, b.Open
}

// Connections carrying topic-list watchers are not evicted, but they count towards
// MaxPrincipals: once that many roles hold watchers, a new role is refused rather than the
// connections growing, and the broker never sees more connections than the bound. When a role
// closes its watcher, its connection may be evicted again and the new role gets one.
func TestWatchersCountTowardsMaxPrincipals(t *testing.T) {
	addr, open := watchingBroker(t)
	control := NewControl(ControlConfig{Connector: testConnector(), MaxPending: 10, ConnsPerBroker: 1, Logger: zerolog.Nop(), MaxPrincipals: 2})
	defer control.Close()
	watch := func(role string) (*TopicWatch, error) {
		cmd := &pb.BaseCommand{Type: pb.BaseCommand_WATCH_TOPIC_LIST.Enum(), WatchTopicList: &pb.CommandWatchTopicList{
			RequestId: proto.Uint64(1), WatcherId: proto.Uint64(1), Namespace: proto.String("public/default"), TopicsPattern: proto.String("persistent://public/default/.*")}}
		_, w, err := control.WatchTopics(context.Background(), addr, Client{Principal: role}, cmd, nopWatcher{})
		return w, err
	}
	var held []*TopicWatch
	for i := range 2 {
		w, err := watch(fmt.Sprintf("role-%d", i))
		if err != nil || w == nil {
			t.Fatalf("watch %d: %v", i, err)
		}
		held = append(held, w)
	}
	for i := 2; i < 20; i++ {
		if _, err := watch(fmt.Sprintf("role-%d", i)); !errors.Is(err, ErrTooManyPrincipals) {
			t.Fatalf("role %d's watch with 2 roles holding watchers: %v, want ErrTooManyPrincipals", i, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := held[0].Close(ctx); err != nil {
		t.Fatal(err)
	}
	if w, err := watch("role-new"); err != nil || w == nil {
		t.Fatalf("watch after one role closed its watcher: %v", err)
	}
	// the evicted connection's close reaching the broker
	wait.Within(5*time.Second, func() bool { return open() <= 2 })
	control.mu.Lock()
	conns := len(control.conns)
	control.mu.Unlock()
	if conns > 2 || open() > 2 {
		t.Fatalf("MaxPrincipals=2, but the Control holds %d per-principal connections and the broker sees %d open", conns, open())
	}
}
