package lookup

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// Resolver answers a lookup-mode client's requests by asking brokers through the pool.
type Resolver struct {
	set          *BrokerSet
	pool         *Pool
	timeout      time.Duration
	maxRedirects int
}

// NewResolver ties the live set to the pool.
func NewResolver(set *BrokerSet, pool *Pool, timeout time.Duration, maxRedirects int) *Resolver {
	return &Resolver{set: set, pool: pool, timeout: timeout, maxRedirects: maxRedirects}
}

// Error is a failure the proxy itself reports to the client, with the ServerError that makes
// the client do the right thing (ServiceNotReady: retry with a fresh lookup).
type Error struct {
	Code    pb.ServerError
	Message string
}

func (e *Error) Error() string { return e.Message }

// Resolve sends a LOOKUP, PARTITIONED_METADATA, GET_TOPICS_OF_NAMESPACE or GET_SCHEMA to a
// broker and returns the broker's answer (its request id is the pool's; the caller restores
// its own). LOOKUP redirects are followed up to the configured number of hops. cmd is
// modified. A broker's refusal comes back as the broker's own answer, not as an error.
func (r *Resolver) Resolve(ctx context.Context, cmd *pb.BaseCommand) (*pb.BaseCommand, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	if cmd.GetType() == pb.BaseCommand_LOOKUP {
		return r.lookup(ctx, cmd)
	}
	return r.anyBroker(ctx, cmd)
}

// anyBroker asks the first broker that answers; a broker that cannot be reached is skipped
// so one dead broker never fails a client's request while another is up.
func (r *Resolver) anyBroker(ctx context.Context, cmd *pb.BaseCommand) (*pb.BaseCommand, error) {
	brokers, err := r.set.Pick()
	if err != nil {
		return nil, &Error{Code: pb.ServerError_ServiceNotReady, Message: err.Error()}
	}
	var errs []error
	for _, b := range brokers {
		resp, err := r.pool.RoundTrip(ctx, b.Addr(), cmd)
		if err == nil {
			return resp, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil || errors.Is(err, ErrPoolClosed) {
			break
		}
	}
	return nil, &Error{Code: pb.ServerError_ServiceNotReady, Message: fmt.Sprintf("no broker answered: %v", errors.Join(errs...))}
}

func (r *Resolver) lookup(ctx context.Context, cmd *pb.BaseCommand) (*pb.BaseCommand, error) {
	resp, err := r.anyBroker(ctx, cmd)
	for hop := 0; ; hop++ {
		if err != nil {
			return nil, err
		}
		lr := resp.GetLookupTopicResponse()
		if resp.GetType() != pb.BaseCommand_LOOKUP_RESPONSE || lr.GetResponse() != pb.CommandLookupTopicResponse_Redirect {
			return resp, nil
		}
		topic := cmd.GetLookupTopic().GetTopic()
		if hop >= r.maxRedirects {
			return nil, &Error{Code: pb.ServerError_ServiceNotReady, Message: fmt.Sprintf("lookup of %s redirected more than %d times", topic, r.maxRedirects)}
		}
		next, perr := ParseBrokerURL(lr.GetBrokerServiceUrl())
		if perr != nil {
			return nil, &Error{Code: pb.ServerError_ServiceNotReady, Message: "broker redirected to " + perr.Error()}
		}
		cmd.LookupTopic.Authoritative = lr.Authoritative
		resp, err = r.pool.RoundTrip(ctx, next.Addr(), cmd)
		if err != nil {
			err = &Error{Code: pb.ServerError_ServiceNotReady, Message: fmt.Sprintf("lookup of %s at %s: %v", topic, next.URL, err)}
		}
	}
}
