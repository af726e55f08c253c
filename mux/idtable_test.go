package mux

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// brokersOwn are id fields a broker fills with values of its own, not a client's: its
// CLOSE_PRODUCER/CLOSE_CONSUMER carry a request_id that answers nothing.
var brokersOwn = map[pb.BaseCommand_Type]protoreflect.Name{
	pb.BaseCommand_CLOSE_PRODUCER: "request_id", pb.BaseCommand_CLOSE_CONSUMER: "request_id",
}

// TestTableCoversProto derives the identifier list from frame/pb's .proto and checks the
// table against it: every command type has a place, and every *_id field of a command's
// sub-message is mapped or known to be global. A protocol update that adds an id fails here.
func TestTableCoversProto(t *testing.T) {
	types := pb.BaseCommand_Type(0).Descriptor().Values()
	base := (&pb.BaseCommand{}).ProtoReflect().Descriptor().Fields()
	for i := 0; i < types.Len(); i++ {
		typ := pb.BaseCommand_Type(types.Get(i).Number())
		fromClient, fromBroker := clientCommands[typ], brokerCommands[typ]
		placed := fromClient != nil || fromBroker != nil || connectionCommands[typ] || brokerToBroker[typ]
		if !placed {
			t.Errorf("%v: not in any table", typ)
			continue
		}
		sub := base.ByNumber(protoreflect.FieldNumber(typ))
		if sub == nil || sub.Message() == nil {
			t.Errorf("%v: BaseCommand has no sub-message field %d", typ, typ)
			continue
		}
		if connectionCommands[typ] || brokerToBroker[typ] {
			continue
		}
		fields := sub.Message().Fields()
		for j := 0; j < fields.Len(); j++ {
			fd := fields.Get(j)
			name := fd.Name()
			if !strings.HasSuffix(string(name), "_id") || globalIDs[name] {
				continue
			}
			if fd.Kind() != protoreflect.Uint64Kind {
				t.Errorf("%v.%s: id of kind %v", typ, name, fd.Kind())
			}
			if fromClient != nil && !listed(fromClient, name) {
				t.Errorf("%v.%s from a client: not mapped", typ, name)
			}
			if fromBroker != nil && !listed(fromBroker, name) && brokersOwn[typ] != name {
				t.Errorf("%v.%s from a broker: not mapped", typ, name)
			}
		}
		for _, list := range [][]idField{fromClient, fromBroker} {
			for _, fl := range list {
				if fields.ByName(fl.name) == nil {
					t.Errorf("%v: table names %s, which the .proto does not have", typ, fl.name)
				}
			}
		}
	}
}

func listed(fields []idField, name protoreflect.Name) bool {
	for _, fl := range fields {
		if fl.name == name {
			return true
		}
	}
	return false
}
