package session

import (
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/edge"
	"github.com/pulsar-proxy/pulsar-proxy/forward"
	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// upstreamFilter asks the edge about a direct session's client commands (edge.Inspected
// names those it must see; the others, the hot path, stay in the pipe's write batches
// undecoded). A refused command is answered and never reaches the broker, and the session
// goes on; a command the edge closes on is answered and ends the session.
func (s *session) upstreamFilter(toBroker, toClient *forward.Sink, ref *refresher, lists *edge.TopicLists) forward.Filter {
	return func(t pb.BaseCommand_Type, command []byte) forward.Verdict {
		d := s.srv.sec.Edge.Command(s.identityNow(), edge.Direct, t, command)
		switch d.Outcome {
		case edge.Refuse:
			s.injectWithin(toClient, d.Reply)
			return forward.Drop
		case edge.Close:
			return s.refuseCommand(toClient, d)
		case edge.Answer:
			return forward.Drop
		}
		if d.Renewal {
			if ref != nil && ref.offer(d.Command.GetAuthResponse()) {
				return forward.Drop
			}
			s.srv.sec.Metrics.RelayedAuthResponse()
		}
		if lists != nil {
			if refusal := lists.Track(d.Command); refusal != nil {
				s.injectWithin(toClient, refusal)
				return forward.Drop
			}
		}
		if !d.Rewritten {
			return forward.Pass
		}
		return s.forwardCommand(toBroker, d.Command)
	}
}

// downstreamFilter hides the topics the client may not look up from the broker's topic-list
// answers (see edge.TopicLists); every other broker frame passes undecoded.
func (s *session) downstreamFilter(toClient *forward.Sink, lists *edge.TopicLists) forward.Filter {
	return func(t pb.BaseCommand_Type, command []byte) forward.Verdict {
		cmd, err := frame.Decode(command)
		if err != nil {
			return forward.Pass // the broker's own frame: the client's parser judges it
		}
		send, err := lists.Filter(cmd)
		if err != nil {
			s.with(s.srv.log.Debug()).Err(err).Msg("closing session")
			s.injectWithin(toClient, frame.Error(0, pb.ServerError_TooManyRequests, "pulsar-proxy: "+err.Error()))
			return forward.End
		}
		if send {
			b, err := frame.AppendCommand(nil, cmd)
			if err != nil || toClient.Write(b) != nil {
				return forward.End
			}
		}
		return forward.Drop
	}
}

// forwardCommand writes the command the edge checked (re-encoded) in place of the client's.
// A failed write closes the broker's socket; the pipe then fails on it as on any broken
// connection.
func (s *session) forwardCommand(toBroker *forward.Sink, cmd *pb.BaseCommand) forward.Verdict {
	b, err := frame.AppendCommand(nil, cmd)
	if err != nil || toBroker.Write(b) != nil {
		toBroker.Close()
	}
	return forward.Drop
}

// refuseCommand tells the client why its command ends the session.
func (s *session) refuseCommand(toClient *forward.Sink, d edge.Decision) forward.Verdict {
	s.logRefusal(d)
	s.injectWithin(toClient, d.Reply)
	return forward.End
}

// logRefusal counts a command that ends its session, and says why at debug level.
func (s *session) logRefusal(d edge.Decision) {
	s.with(s.srv.log.Debug()).Str("reason", string(d.Reason)).Str("refusal", refusalText(d.Reply)).Msg("refusing client command; closing")
	s.srv.metrics.refusedCommands.WithLabelValues(string(d.Reason)).Inc()
}

// refusalText is the message of an error answer, for the log.
func refusalText(cmd *pb.BaseCommand) string {
	if e := cmd.GetError(); e != nil {
		return e.GetMessage()
	}
	return cmd.GetLookupTopicResponse().GetMessage() + cmd.GetPartitionMetadataResponse().GetMessage()
}

// injectWithin writes an answer to the client, giving up (and closing the client's socket,
// which ends the session) when the client does not take it within the handshake timeout: a
// client that stops reading must not hold the filter, and with it the broker's side, forever.
func (s *session) injectWithin(toClient *forward.Sink, cmd *pb.BaseCommand) {
	stuck := time.AfterFunc(s.srv.cfg.HandshakeTimeout, toClient.Close)
	defer stuck.Stop()
	toClient.Inject(cmd)
}
