package session

import (
	"context"
	"errors"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/edge"
	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/lookup"
	"github.com/pulsar-proxy/pulsar-proxy/upstream"
)

// topicWatchResolver is a Resolver that also opens topic-list watchers on brokers for
// lookup-mode clients (lookup.Resolver).
type topicWatchResolver interface {
	TopicWatchers(ctx context.Context, client upstream.Client) bool
	WatchTopics(ctx context.Context, client upstream.Client, cmd *pb.BaseCommand, w upstream.TopicWatcher) (*pb.BaseCommand, *upstream.TopicWatch, error)
}

// offersTopicWatchers says whether a lookup-mode CONNECTED offers topic-list watchers: when
// the brokers do and the proxy can open them (see watchesTopics).
func (s *session) offersTopicWatchers() bool {
	return s.watchesTopics() && s.srv.resolver.(topicWatchResolver).TopicWatchers(s.ctx, s.brokerClient())
}

// watchesTopics says whether the proxy opens lookup-mode clients' topic-list watchers. Not
// with forwarded client credentials: a pooled connection carrying them is retired when they
// expire, and a watcher on it would be lost at each expiry however the client renews.
func (s *session) watchesTopics() bool {
	_, ok := s.srv.resolver.(topicWatchResolver)
	return ok && !s.srv.sec.ForwardClientCredentials
}

// maxEarlyUpdates bounds the updates a watcher may get before the broker's answer to its
// opening has been handled (normally none or one: they race on the pooled connection).
const maxEarlyUpdates = 64

// maxQueuedToClient bounds the answers and updates of watchers waiting to be written to a
// lookup-mode client; beyond it the client is not reading (see session.reply).
const maxQueuedToClient = 1024

// lookupWatchers are the topic-list watchers a lookup-mode client opened through the proxy.
// Each is open on a broker over the control connection of the client's principal, shared with
// other clients' watchers, so its id there is the Control's: the client's ids are put back on
// everything the broker sends. Topic names are filtered by the policy as in a direct session
// (topicLists), and what goes to the client keeps the broker's order through one queue.
type lookupWatchers struct {
	l     *lookupSession
	lists *edge.TopicLists // bounds watchers per connection; filters names when a policy is set

	mu      sync.Mutex
	open    map[uint64]*clientWatch // by the client's watcher id
	queue   []*pb.BaseCommand       // to the client, in order
	writing bool                    // a goroutine writes the queue
	closed  bool                    // the session ended: nothing more is queued
}

// clientWatch is one watcher of a lookup-mode client.
type clientWatch struct {
	ws    *lookupWatchers
	id    uint64               // the client's watcher id
	watch *upstream.TopicWatch // nil until the broker answered its opening
	early []*pb.CommandWatchTopicUpdate
}

func newLookupWatchers(l *lookupSession) *lookupWatchers {
	return &lookupWatchers{l: l, lists: l.s.topicLists(), open: map[uint64]*clientWatch{}}
}

// filtering says whether topic names are filtered (and topic-list hashes recomputed).
func (ws *lookupWatchers) filtering() bool { return ws.l.s.srv.sec.Edge.Policed() }

// start opens the watcher a client's WATCH_TOPIC_LIST asks for (its lookup admission is done;
// done gives it back once the broker answered).
func (ws *lookupWatchers) start(cmd *pb.BaseCommand, done func()) {
	s := ws.l.s
	req := cmd.GetWatchTopicList()
	id, reqID := req.GetWatcherId(), req.GetRequestId()
	// Without its hash the broker always sends the whole list, which the proxy filters and
	// hashes itself (the client's hash is of the filtered list, never the broker's).
	req.TopicsHash = nil
	cw := &clientWatch{ws: ws, id: id}
	if code, msg := ws.register(cw); msg != "" {
		done()
		s.writeFailure(cmd, code, msg)
		return
	}
	resolver := s.srv.resolver.(topicWatchResolver)
	resp, watch, err := resolver.WatchTopics(s.ctx, s.brokerClient(), cmd, cw)
	done()
	frame.SetRequestID(cmd, reqID) // the Control gave it its own
	if err != nil {
		ws.unregister(cw)
		code, msg := pb.ServerError_ServiceNotReady, "pulsar-proxy: "+err.Error()
		var le *lookup.Error
		if errors.As(err, &le) {
			code = le.Code
		}
		s.srv.metrics.lookups.WithLabelValues(cmd.GetType().String(), "error").Inc()
		s.writeFailure(cmd, code, msg)
		return
	}
	s.srv.metrics.lookups.WithLabelValues(cmd.GetType().String(), resultOf(resp)).Inc()
	frame.SetRequestID(resp, reqID)
	if watch == nil { // the broker refused it
		ws.unregister(cw)
		s.reply(resp)
		return
	}
	resp.GetWatchTopicListSuccess().WatcherId = proto.Uint64(id)
	ws.opened(cw, watch, resp)
}

// register adds a watcher the client opens; a message says why it may not.
func (ws *lookupWatchers) register(cw *clientWatch) (pb.ServerError, string) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	switch {
	case ws.closed:
		return pb.ServerError_ServiceNotReady, "pulsar-proxy: the connection is closing"
	case ws.open[cw.id] != nil:
		return pb.ServerError_NotAllowedError, "pulsar-proxy: this connection already has a topic-list watcher with that id"
	case !ws.lists.Watch(cw.id):
		return pb.ServerError_TooManyRequests, "pulsar-proxy: too many topic-list watchers on this connection"
	}
	ws.open[cw.id] = cw
	return 0, ""
}

// unregister forgets a watcher; false if it was not registered (any more).
func (ws *lookupWatchers) unregister(cw *clientWatch) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return ws.unregisterLocked(cw)
}

func (ws *lookupWatchers) unregisterLocked(cw *clientWatch) bool {
	if cw == nil || ws.open[cw.id] != cw {
		return false
	}
	delete(ws.open, cw.id)
	ws.lists.Forget(cw.id)
	return true
}

// opened queues the broker's answer, then any updates that raced ahead of it.
func (ws *lookupWatchers) opened(cw *clientWatch, watch *upstream.TopicWatch, resp *pb.BaseCommand) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.closed || ws.open[cw.id] != cw {
		// Closed by the client, or the session ended, while it opened.
		go watch.Forget()
		ws.queueLocked(frame.Error(resp.GetWatchTopicListSuccess().GetRequestId(), pb.ServerError_ServiceNotReady, "pulsar-proxy: the topic-list watcher was closed while it opened"))
		return
	}
	cw.watch = watch
	if ws.filtering() {
		if _, err := ws.lists.Filter(resp); err != nil {
			ws.failLocked(ReasonClientNotReading)
			return
		}
	}
	ws.queueLocked(resp)
	for _, u := range cw.early {
		ws.updateLocked(cw, u)
	}
	cw.early = nil
}

// Update takes a broker's update for the watcher (on the pooled connection's reader).
func (cw *clientWatch) Update(u *pb.CommandWatchTopicUpdate) {
	ws := cw.ws
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.closed || ws.open[cw.id] != cw {
		return
	}
	if cw.watch == nil {
		if len(cw.early) >= maxEarlyUpdates {
			ws.failLocked(ReasonClientNotReading)
			return
		}
		cw.early = append(cw.early, u)
		return
	}
	ws.updateLocked(cw, u)
}

func (ws *lookupWatchers) updateLocked(cw *clientWatch, u *pb.CommandWatchTopicUpdate) {
	u.WatcherId = proto.Uint64(cw.id)
	cmd := &pb.BaseCommand{Type: pb.BaseCommand_WATCH_TOPIC_UPDATE.Enum(), WatchTopicUpdate: u}
	if ws.filtering() {
		send, err := ws.lists.Filter(cmd)
		if err != nil {
			ws.failLocked(ReasonClientNotReading)
			return
		}
		if !send {
			return
		}
	}
	ws.queueLocked(cmd)
}

// Lost is called when the pooled connection carrying the watcher went away: the broker
// forgot it, and no command tells a client so. The client's connection is closed, as a
// broker's would be, and the client opens its watchers again on a new one.
// A watcher still opening is left to its opening, which fails on its own (or moves to
// another broker).
func (cw *clientWatch) Lost(error) {
	ws := cw.ws
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if cw.watch != nil && ws.unregisterLocked(cw) {
		ws.failLocked(ReasonBrokerClosed)
	}
}

// close answers the client's WATCH_TOPIC_LIST_CLOSE once the broker closed the watcher.
func (ws *lookupWatchers) close(cmd *pb.BaseCommand) {
	s := ws.l.s
	c := cmd.GetWatchTopicListClose()
	success := &pb.BaseCommand{Type: pb.BaseCommand_SUCCESS.Enum(), Success: &pb.CommandSuccess{RequestId: proto.Uint64(c.GetRequestId())}}
	ws.mu.Lock()
	var watch *upstream.TopicWatch
	if cw := ws.open[c.GetWatcherId()]; ws.unregisterLocked(cw) {
		watch = cw.watch
	}
	ws.mu.Unlock()
	if watch == nil {
		// Not open (any more), or still opening: opened() then closes it on the broker.
		s.reply(success)
		return
	}
	select { // a close waits on the broker like a lookup, within the same bound
	case ws.l.slots <- struct{}{}:
	default:
		watch.Forget()
		s.reply(success)
		return
	}
	ws.l.background(func() {
		defer func() { <-ws.l.slots }()
		ctx, cancel := context.WithTimeout(s.ctx, s.srv.cfg.KeepAliveInterval)
		defer cancel()
		resp, err := watch.Close(ctx)
		if err != nil || resp.GetType() != pb.BaseCommand_ERROR {
			// Gone with its connection or the session, or closed: either way closed.
			s.reply(success)
			return
		}
		frame.SetRequestID(resp, c.GetRequestId())
		s.reply(resp)
	})
}

// end closes every watcher on the brokers: the client is gone.
func (ws *lookupWatchers) end() {
	ws.mu.Lock()
	ws.closed = true
	open := ws.open
	ws.open = map[uint64]*clientWatch{}
	ws.queue = nil
	ws.mu.Unlock()
	for _, cw := range open {
		if cw.watch != nil {
			cw.watch.Forget()
		}
	}
	ws.lists.Close()
}

// queueLocked puts a command on the way to the client, behind what is already queued.
func (ws *lookupWatchers) queueLocked(cmd *pb.BaseCommand) {
	if ws.closed {
		return
	}
	if len(ws.queue) >= maxQueuedToClient {
		ws.failLocked(ReasonClientNotReading)
		return
	}
	ws.queue = append(ws.queue, cmd)
	if !ws.writing {
		ws.writing = true
		ws.l.background(ws.write)
	}
}

// write sends the queue to the client until it is empty.
func (ws *lookupWatchers) write() {
	for {
		ws.mu.Lock()
		if len(ws.queue) == 0 || ws.closed {
			ws.writing = false
			ws.mu.Unlock()
			return
		}
		cmd := ws.queue[0]
		ws.queue[0] = nil
		ws.queue = ws.queue[1:]
		ws.mu.Unlock()
		if ws.l.s.reply(cmd) != nil {
			return // the session is ending; end() clears the rest
		}
	}
}

// failLocked ends the session for reason.
func (ws *lookupWatchers) failLocked(reason CloseReason) {
	ws.closed = true
	ws.queue = nil
	ws.l.s.close(reason)
}
