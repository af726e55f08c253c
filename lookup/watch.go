package lookup

import (
	"context"
	"errors"
	"fmt"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/upstream"
)

// watchControl is a RoundTripper that also opens topic-list watchers (upstream.Control
// does).
type watchControl interface {
	WatchTopics(ctx context.Context, addr string, client upstream.Client, cmd *pb.BaseCommand, w upstream.TopicWatcher) (*pb.BaseCommand, *upstream.TopicWatch, error)
	TopicWatchers() (offered, known bool)
	Ping(ctx context.Context, addr string, client upstream.Client) error
}

// TopicWatchers says whether lookup-mode clients may be offered topic-list watchers: the
// brokers offer them and the control connections can open them. Until the Control has seen a
// broker's CONNECTED, it connects to one for client (whose lookups will use that connection).
func (r *Resolver) TopicWatchers(ctx context.Context, client upstream.Client) bool {
	p, ok := r.control.(watchControl)
	if !ok {
		return false
	}
	if offered, known := p.TopicWatchers(); known {
		return offered
	}
	candidates, err := r.set.Pick()
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	p.Ping(ctx, candidates[0].Addr(), client) // a failure leaves it unknown: not offered
	offered, _ := p.TopicWatchers()
	return offered
}

// WatchTopics opens a lookup-mode client's topic-list watcher (cmd: its WATCH_TOPIC_LIST) on
// the first broker that answers, over the control connection of client. Any broker
// serves a namespace's watcher: it follows the metadata store, not bundle ownership. The
// answer's ids are the Control's; the caller restores its own.
func (r *Resolver) WatchTopics(ctx context.Context, client upstream.Client, cmd *pb.BaseCommand, w upstream.TopicWatcher) (*pb.BaseCommand, *upstream.TopicWatch, error) {
	p, ok := r.control.(watchControl)
	if !ok {
		return nil, nil, &Error{Code: pb.ServerError_NotAllowedError, Message: "topic-list watchers are not served here"}
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	candidates, err := r.set.Pick()
	if err != nil {
		return nil, nil, &Error{Code: pb.ServerError_ServiceNotReady, Message: err.Error()}
	}
	var errs []error
	for _, b := range candidates {
		r.metrics.brokerRequests.WithLabelValues(cmd.GetType().String(), b.Addr()).Inc()
		resp, watch, err := p.WatchTopics(ctx, b.Addr(), client, cmd, w)
		if err == nil {
			return resp, watch, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil || errors.Is(err, upstream.ErrControlClosed) {
			break
		}
	}
	return nil, nil, &Error{Code: pb.ServerError_ServiceNotReady, Message: fmt.Sprintf("no broker answered: %v", errors.Join(errs...))}
}
