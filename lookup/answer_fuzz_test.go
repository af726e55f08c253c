package lookup

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/brokers"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// FuzzLookupAnswer: whatever a broker's LOOKUP answer says, reading its endpoint does not
// panic, and the rewritten answer (both URLs pinned to the endpoint the proxy dials) names
// that endpoint and nothing else, whichever URL a client takes.
func FuzzLookupAnswer(f *testing.F) {
	for _, lr := range []*pb.CommandLookupTopicResponse{
		{BrokerServiceUrl: proto.String("pulsar://broker-0.pulsar:6650"), BrokerServiceUrlTls: proto.String("pulsar+ssl://broker-0.pulsar:6651")},
		{BrokerServiceUrl: proto.String("pulsar://[::1]:6650")},
		{BrokerServiceUrl: proto.String("pulsar://u:p@evil:6650/x")},
		{BrokerServiceUrlTls: proto.String("pulsar+ssl://b:6651?x=1")},
	} {
		b, _ := proto.Marshal(lr)
		f.Add(b, false)
		f.Add(b, true)
	}
	f.Fuzz(func(t *testing.T, data []byte, brokerTLS bool) {
		lr := &pb.CommandLookupTopicResponse{}
		if proto.Unmarshal(data, lr) != nil {
			return
		}
		r := &Resolver{brokerTLS: brokerTLS}
		b, err := r.endpoint(lr)
		if err != nil {
			return
		}
		pinEndpoint(lr, b)
		for _, u := range []string{lr.GetBrokerServiceUrl(), lr.GetBrokerServiceUrlTls()} {
			got, err := brokers.ParseURL(u)
			if err != nil || got.Addr() != b.Addr() {
				t.Fatalf("pinned %q for endpoint %s: %v, %v", u, b.Addr(), got, err)
			}
		}
	})
}
