package upstream

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// TopicWatcher receives what a broker sends about one topic-list watcher opened through the
// Control. Update is called on the control connection's reader, so it must not block; Lost is
// called once if the connection goes away while the watcher is open (the broker forgot it).
type TopicWatcher interface {
	Update(*pb.CommandWatchTopicUpdate)
	Lost(error)
}

// TopicWatch is a watcher open on a control connection.
type TopicWatch struct {
	c  *brokerConn
	id uint64 // the watcher id on that connection
}

// WatchTopics opens a topic-list watcher (cmd is a WATCH_TOPIC_LIST) on the control
// connection to addr made for client. Several clients' watchers share that connection,
// so the watcher id becomes one unique on it; w gets the broker's updates for it. The answer
// is the broker's (a WATCH_TOPIC_LIST_SUCCESS or an ERROR), its ids the Control's; on anything
// but success the watcher is not open. cmd is modified.
func (ctl *Control) WatchTopics(ctx context.Context, addr string, client Client, cmd *pb.BaseCommand, w TopicWatcher) (*pb.BaseCommand, *TopicWatch, error) {
	wl := cmd.GetWatchTopicList()
	if wl == nil {
		return nil, nil, fmt.Errorf("%v is not a WATCH_TOPIC_LIST", cmd.GetType())
	}
	c, err := ctl.conn(ctx, addr, client)
	if err != nil {
		return nil, nil, err
	}
	watch := &TopicWatch{c: c, id: c.nextID.Add(1)}
	if err := c.addWatcher(watch.id, w); err != nil {
		return nil, nil, err
	}
	wl.WatcherId = proto.Uint64(watch.id)
	resp, err := c.roundTrip(ctx, cmd)
	switch {
	case err != nil:
		watch.Forget() // the broker may have opened it, its answer merely late
		return nil, nil, err
	case resp.GetType() != pb.BaseCommand_WATCH_TOPIC_LIST_SUCCESS:
		c.dropWatcher(watch.id)
		return resp, nil, nil
	}
	return resp, watch, nil
}

// Close closes the watcher on the broker and returns the broker's answer (SUCCESS or ERROR,
// its request id the Control's); the watcher hears nothing more.
func (w *TopicWatch) Close(ctx context.Context) (*pb.BaseCommand, error) {
	if !w.c.dropWatcher(w.id) {
		return nil, errWatcherLost
	}
	return w.c.roundTrip(ctx, w.closeCommand())
}

// Forget closes the watcher on the broker without waiting for the answer: its client is gone.
func (w *TopicWatch) Forget() {
	if w.c.dropWatcher(w.id) {
		cmd := w.closeCommand()
		cmd.WatchTopicListClose.RequestId = proto.Uint64(w.c.nextID.Add(1)) // its answer is dropped
		w.c.write(cmd)
	}
}

func (w *TopicWatch) closeCommand() *pb.BaseCommand {
	return &pb.BaseCommand{
		Type:                pb.BaseCommand_WATCH_TOPIC_LIST_CLOSE.Enum(),
		WatchTopicListClose: &pb.CommandWatchTopicListClose{RequestId: proto.Uint64(0), WatcherId: proto.Uint64(w.id)},
	}
}

var (
	errWatchersClosed = errors.New("pooled broker connection closed")
	errWatcherLost    = errors.New("topic-list watcher lost with its broker connection")
)

func (c *brokerConn) addWatcher(id uint64, w TopicWatcher) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	if c.watchers == nil {
		c.watchers = map[uint64]TopicWatcher{}
	}
	c.watchers[id] = w
	return nil
}

func (c *brokerConn) dropWatcher(id uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, open := c.watchers[id]
	delete(c.watchers, id)
	return open
}

// watching reports whether the connection carries watchers (it is then not evicted for
// being least recently used: its clients would lose them).
func (c *brokerConn) watching() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.watchers) > 0
}

// topicUpdate hands a broker's WATCH_TOPIC_UPDATE to its watcher.
func (c *brokerConn) topicUpdate(u *pb.CommandWatchTopicUpdate) {
	c.mu.Lock()
	w := c.watchers[u.GetWatcherId()]
	c.mu.Unlock()
	if w == nil {
		c.log.Debug().Uint64("watcher", u.GetWatcherId()).Msg("topic-list update for a watcher no longer open")
		return
	}
	w.Update(u)
}

// loseWatchers tells every watcher its connection is gone (c.err is set).
func (c *brokerConn) loseWatchers() {
	c.mu.Lock()
	lost := c.watchers
	c.watchers = nil
	err := c.err
	c.mu.Unlock()
	if err == nil {
		err = errWatchersClosed
	}
	for _, w := range lost {
		w.Lost(err)
	}
}

// topicWatchersOffered records whether a broker's CONNECTED offers topic-list watchers.
func (ctl *Control) topicWatchersOffered(connected *pb.CommandConnected) {
	offered := connected.GetFeatureFlags().GetSupportsTopicWatchers()
	ctl.watchersOffered.Store(&offered)
}

// TopicWatchers says whether the brokers offer topic-list watchers, as the last broker
// CONNECTED the Control saw said; known is false before it has seen one.
func (ctl *Control) TopicWatchers() (offered, known bool) {
	o := ctl.watchersOffered.Load()
	return o != nil && *o, o != nil
}
