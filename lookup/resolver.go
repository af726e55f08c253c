// Package lookup answers lookup-mode clients: the Resolver asks a broker from the live set
// (package brokers) over the proxy's own broker connections, follows LOOKUP redirects only to
// brokers the target rule allows, pins answers to the endpoint the proxy dials, and coalesces
// identical requests.
package lookup

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/brokers"
	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
	"github.com/pulsar-proxy/pulsar-proxy/upstream"
)

// Resolver answers a lookup-mode client's requests by asking brokers over the control
// connections.
type Resolver struct {
	set          *brokers.Set
	control      RoundTripper
	timeout      time.Duration
	maxRedirects int
	brokerTLS    bool // brokers are dialled over TLS: answers name their TLS endpoints
	metrics      *Metrics
	flight       singleflight.Group
}

// NewResolver ties the live set to the control connections; brokerTLS says they and the
// sessions dial brokers over TLS. m may be nil (unregistered metrics).
func NewResolver(set *brokers.Set, control RoundTripper, timeout time.Duration, maxRedirects int, brokerTLS bool, m *Metrics) *Resolver {
	if m == nil {
		m = NewMetrics(nil)
	}
	return &Resolver{set: set, control: control, timeout: timeout, maxRedirects: maxRedirects, brokerTLS: brokerTLS, metrics: m}
}

// RoundTripper sends one request to the broker at addr and returns its answer: the proxy's
// control connections (upstream.Control), which make it as client.
type RoundTripper interface {
	RoundTrip(ctx context.Context, addr string, client upstream.Client, cmd *pb.BaseCommand) (*pb.BaseCommand, error)
}

// coalesceKey identifies requests whose answers are interchangeable: LOOKUP and
// PARTITIONED_METADATA requests equal in every field but the request id (topic,
// authoritative, listener, properties, metadata_auto_creation_enabled, and any field a later
// protocol adds), made for the same principal (clients with different rights never share an
// answer). Other commands are not coalesced.
func coalesceKey(client upstream.Client, cmd *pb.BaseCommand) (string, bool) {
	switch cmd.GetType() {
	case pb.BaseCommand_LOOKUP, pb.BaseCommand_PARTITIONED_METADATA:
	default:
		return "", false
	}
	c := proto.Clone(cmd).(*pb.BaseCommand)
	frame.SetRequestID(c, 0)
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(c)
	if err != nil {
		return "", false
	}
	p := client.Principal
	return strconv.Itoa(len(p)) + ":" + p + string(b), true
}

// Error is a failure the proxy itself reports to the client, with the ServerError that makes
// the client do the right thing (ServiceNotReady: retry with a fresh lookup).
type Error struct {
	Code    pb.ServerError
	Message string
}

func (e *Error) Error() string { return e.Message }

// Resolve sends a LOOKUP, PARTITIONED_METADATA, GET_TOPICS_OF_NAMESPACE or GET_SCHEMA to a
// broker, as client, and returns the broker's answer (its request id is the Control's; the
// caller restores its own). LOOKUP redirects are followed up to the configured number of
// hops, each only to a broker the target rule allows (brokers.Set.Allow, after Learn), and a
// LOOKUP answer's two broker URLs both name the endpoint the proxy dials (see pinEndpoint).
// cmd is modified. A broker's refusal comes back as the broker's own answer, not as an error.
//
// Identical concurrent LOOKUP and PARTITIONED_METADATA requests (see coalesceKey) share one
// broker request; each caller gets its own copy of the answer.
func (r *Resolver) Resolve(ctx context.Context, client upstream.Client, cmd *pb.BaseCommand) (*pb.BaseCommand, error) {
	key, ok := coalesceKey(client, cmd)
	if !ok {
		ctx, cancel := context.WithTimeout(ctx, r.timeout)
		defer cancel()
		return r.resolve(ctx, client, cmd)
	}
	var ran atomic.Bool
	ch := r.flight.DoChan(key, func() (any, error) {
		ran.Store(true)
		// Detached from this caller: one client hanging up must not fail the others that
		// wait for the same answer. The timeout still bounds it.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.timeout)
		defer cancel()
		return r.resolve(fctx, client, proto.Clone(cmd).(*pb.BaseCommand))
	})
	select {
	case res := <-ch:
		if !ran.Load() {
			r.metrics.coalesced.WithLabelValues(cmd.GetType().String()).Inc()
		}
		if res.Err != nil {
			return nil, res.Err
		}
		return proto.Clone(res.Val.(*pb.BaseCommand)).(*pb.BaseCommand), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (r *Resolver) resolve(ctx context.Context, client upstream.Client, cmd *pb.BaseCommand) (*pb.BaseCommand, error) {
	if cmd.GetType() == pb.BaseCommand_LOOKUP {
		return r.lookup(ctx, client, cmd)
	}
	return r.anyBroker(ctx, client, cmd)
}

// anyBroker asks the first broker that answers; a broker that cannot be reached is skipped
// so one dead broker never fails a client's request while another is up.
func (r *Resolver) anyBroker(ctx context.Context, client upstream.Client, cmd *pb.BaseCommand) (*pb.BaseCommand, error) {
	candidates, err := r.set.Pick()
	if err != nil {
		return nil, &Error{Code: pb.ServerError_ServiceNotReady, Message: err.Error()}
	}
	var errs []error
	for _, b := range candidates {
		resp, err := r.roundTrip(ctx, b.Addr(), client, cmd)
		if err == nil {
			return resp, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil || errors.Is(err, upstream.ErrControlClosed) {
			break
		}
	}
	return nil, &Error{Code: pb.ServerError_ServiceNotReady, Message: fmt.Sprintf("no broker answered: %v", errors.Join(errs...))}
}

func (r *Resolver) lookup(ctx context.Context, client upstream.Client, cmd *pb.BaseCommand) (*pb.BaseCommand, error) {
	resp, err := r.anyBroker(ctx, client, cmd)
	for hop := 0; ; hop++ {
		if err != nil {
			return nil, err
		}
		lr := resp.GetLookupTopicResponse()
		if resp.GetType() != pb.BaseCommand_LOOKUP_RESPONSE || lr.GetResponse() == pb.CommandLookupTopicResponse_Failed {
			return resp, nil
		}
		topic := cmd.GetLookupTopic().GetTopic()
		next, perr := r.endpoint(lr)
		if perr != nil {
			return nil, &Error{Code: pb.ServerError_ServiceNotReady, Message: fmt.Sprintf("lookup of %s: %v", topic, perr)}
		}
		// A broker named it; a client may be sent there (see brokers.Set.Learn).
		r.set.Learn(next.URL)
		if lr.GetResponse() != pb.CommandLookupTopicResponse_Redirect {
			pinEndpoint(lr, next)
			return resp, nil
		}
		if hop >= r.maxRedirects {
			return nil, &Error{Code: pb.ServerError_ServiceNotReady, Message: fmt.Sprintf("lookup of %s redirected more than %d times", topic, r.maxRedirects)}
		}
		// The proxy dials a redirect target itself, with its own credentials: it must pass
		// the rule a client's target does (allowed port, not dropped by discovery).
		if _, aerr := r.set.Allow(next.Addr()); aerr != nil {
			return nil, &Error{Code: pb.ServerError_ServiceNotReady, Message: fmt.Sprintf("lookup of %s: a broker redirected to %s, which the proxy may not dial: %v", topic, next.URL, aerr)}
		}
		cmd.LookupTopic.Authoritative = lr.Authoritative
		resp, err = r.roundTrip(ctx, next.Addr(), client, cmd)
		if err != nil {
			err = &Error{Code: pb.ServerError_ServiceNotReady, Message: fmt.Sprintf("lookup of %s at %s: %v", topic, next.URL, err)}
		}
	}
}

// endpoint is the broker a LOOKUP answer names, as the proxy reaches it: its TLS URL when
// brokers are dialled over TLS, its plaintext URL otherwise.
func (r *Resolver) endpoint(lr *pb.CommandLookupTopicResponse) (brokers.Broker, error) {
	raw, which := lr.GetBrokerServiceUrl(), "brokerServiceUrl"
	if r.brokerTLS {
		raw, which = lr.GetBrokerServiceUrlTls(), "brokerServiceUrlTls"
	}
	if raw == "" {
		return brokers.Broker{}, fmt.Errorf("the broker's answer has no %s (with broker.tls.enabled the brokers need brokerServicePortTls)", which)
	}
	return brokers.ParseURL(raw)
}

// pinEndpoint makes both URLs of an answer name the endpoint the proxy dials. A client
// behind the proxy connects to the proxy either way and only hands the URL it picked (by
// its own TLS setting) back as proxy_to_broker_url; pinning makes that the endpoint the
// proxy knows how to reach, whichever the client picks.
func pinEndpoint(lr *pb.CommandLookupTopicResponse, b brokers.Broker) {
	lr.BrokerServiceUrl = proto.String("pulsar://" + b.Addr())
	lr.BrokerServiceUrlTls = proto.String("pulsar+ssl://" + b.Addr())
}

func (r *Resolver) roundTrip(ctx context.Context, addr string, client upstream.Client, cmd *pb.BaseCommand) (*pb.BaseCommand, error) {
	r.metrics.brokerRequests.WithLabelValues(cmd.GetType().String(), addr).Inc()
	return r.control.RoundTrip(ctx, addr, client, cmd)
}
