package session

import (
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/authz"
	"github.com/pulsar-proxy/pulsar-proxy/frame"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// watchedByFilter names the client commands upstreamFilter must see; all others (the hot
// path: SEND, ACK, FLOW...) stay in the pipe's write batches, undecoded.
func watchedByFilter(t pb.BaseCommand_Type) bool { return ruleFor(t) != pass }

// upstreamFilter applies the client rules (see clientRule) to a direct session's client
// commands. A command the policy denies is answered with AuthorizationError for its request
// id and never reaches the broker; the session goes on. A command no client may send, or
// one that cannot be decoded, is answered with an error and ends the session: the broker's
// lenient decoder might read it as something the proxy did not check.
func (s *session) upstreamFilter(toBroker, toClient *sink, ref *refresher, lists *topicLists) filterFunc {
	return func(t pb.BaseCommand_Type, command []byte) verdict {
		switch ruleFor(t) {
		case pass:
			return forwardFrame
		case checkTopics:
			return s.checkTopics(t, command, toBroker, toClient)
		case listTopics:
			return s.listTopics(t, command, toBroker, toClient, lists)
		case renewal:
			return s.takeAuthResponse(t, command, toBroker, toClient, ref)
		}
		return s.refuseCommand(toClient, nil, refusedType, pb.ServerError_NotAllowedError,
			"pulsar-proxy: "+t.String()+" may not be sent on a connection to a broker")
	}
}

// checkTopics forwards a command whose every topic the policy allows, re-encoded.
func (s *session) checkTopics(t pb.BaseCommand_Type, command []byte, toBroker, toClient *sink) verdict {
	check := topicChecks[t]
	cmd, canon, err := canonical(t, command)
	if err != nil {
		s.srv.sec.Metrics.Denied(check.action)
		return s.refuseCommand(toClient, nil, refusedUndecodable, pb.ServerError_AuthorizationError, "pulsar-proxy: cannot read "+t.String()+": "+err.Error())
	}
	if hasOriginalFields(cmd) {
		return s.refuseCommand(toClient, cmd, refusedForgedFields, pb.ServerError_NotAllowedError, "pulsar-proxy: clients may not set original_principal or original_auth_*; only a proxy sets them")
	}
	topics := check.topics(cmd)
	if len(topics) == 0 {
		topics = []string{""} // a command naming no topic is checked as the empty name: denied
	}
	for _, topic := range topics {
		if !s.allowed(check.action, topic) {
			s.injectWithin(toClient, failureFor(cmd, pb.ServerError_AuthorizationError, denyMessage(s.role(), check.action, topic)))
			return dropFrame
		}
	}
	s.srv.sec.Metrics.Forwarded(check.action)
	return s.forwardCanonical(toBroker, canon)
}

// listTopics forwards a namespace's topic-list request re-encoded; the broker's answers are
// filtered on the way back (see topicLists).
func (s *session) listTopics(t pb.BaseCommand_Type, command []byte, toBroker, toClient *sink, lists *topicLists) verdict {
	cmd, canon, err := canonical(t, command)
	if err != nil {
		s.srv.sec.Metrics.Denied(authz.ActionLookup)
		return s.refuseCommand(toClient, nil, refusedUndecodable, pb.ServerError_AuthorizationError, "pulsar-proxy: cannot read "+t.String()+": "+err.Error())
	}
	if lists != nil {
		if w := cmd.GetWatchTopicList(); w != nil && !lists.watch(w.GetWatcherId()) {
			s.injectWithin(toClient, failureFor(cmd, pb.ServerError_TooManyRequests, "pulsar-proxy: too many topic-list watchers on this connection"))
			return dropFrame
		}
		if c := cmd.GetWatchTopicListClose(); c != nil {
			lists.forget(c.GetWatcherId())
		}
	}
	return s.forwardCanonical(toBroker, canon)
}

// watchedTopicLists names the broker answers that carry topic lists.
func watchedTopicLists(t pb.BaseCommand_Type) bool {
	return t == pb.BaseCommand_GET_TOPICS_OF_NAMESPACE_RESPONSE || t == pb.BaseCommand_WATCH_TOPIC_LIST_SUCCESS ||
		t == pb.BaseCommand_WATCH_TOPIC_UPDATE
}

// downstreamFilter hides the topics the client may not look up from the broker's topic-list
// answers (see topicLists); every other broker frame passes undecoded.
func (s *session) downstreamFilter(toClient *sink, lists *topicLists) filterFunc {
	return func(t pb.BaseCommand_Type, command []byte) verdict {
		cmd, err := frame.Decode(command)
		if err != nil {
			return forwardFrame // the broker's own frame: the client's parser judges it
		}
		send, err := lists.filter(cmd)
		if err != nil {
			s.with(s.srv.log.Debug()).Err(err).Msg("closing session")
			s.injectWithin(toClient, frame.Error(0, pb.ServerError_TooManyRequests, "pulsar-proxy: "+err.Error()))
			return endSession
		}
		if send {
			b, err := frame.AppendCommand(nil, cmd)
			if err != nil || toClient.write(b) != nil {
				return endSession
			}
		}
		return dropFrame
	}
}

// mayLookUp says whether the client's role may see a topic in a list.
func (s *session) mayLookUp(topic string) bool {
	p := s.srv.sec.Policy.Policy()
	return p.Allowed(s.role(), authz.ActionLookup, topic)
}

// takeAuthResponse hands the answer to the proxy's own challenge to the refresher; any other
// goes to the broker (it asked), re-encoded.
func (s *session) takeAuthResponse(t pb.BaseCommand_Type, command []byte, toBroker, toClient *sink, ref *refresher) verdict {
	cmd, canon, err := canonical(t, command)
	if err != nil {
		return s.refuseCommand(toClient, nil, refusedUndecodable, pb.ServerError_AuthenticationError, "pulsar-proxy: cannot read AUTH_RESPONSE: "+err.Error())
	}
	if ref != nil && ref.offer(cmd.GetAuthResponse()) {
		return dropFrame
	}
	s.srv.sec.Metrics.RelayedAuthResponse()
	return s.forwardCanonical(toBroker, canon)
}

// forwardCanonical writes the re-encoded command in place of the client's. A failed write
// closes the broker's socket; the pipe then fails on it as on any broken connection.
func (s *session) forwardCanonical(toBroker *sink, canon []byte) verdict {
	if toBroker.write(canon) != nil {
		toBroker.close()
	}
	return dropFrame
}

// Why a direct session's client command was refused, as a metric label.
const (
	refusedType         = "type_not_allowed"
	refusedUndecodable  = "undecodable"
	refusedForgedFields = "forged_proxy_fields"
)

// refuseCommand tells the client why its command ends the session; cmd may be nil when it
// could not be decoded.
func (s *session) refuseCommand(toClient *sink, cmd *pb.BaseCommand, why string, code pb.ServerError, msg string) verdict {
	s.with(s.srv.log.Debug()).Str("message", msg).Msg("refusing client command; closing")
	answer := frame.Error(0, code, msg)
	if cmd != nil {
		answer = failureFor(cmd, code, msg)
	}
	s.injectWithin(toClient, answer)
	s.srv.metrics.refusedCommands.WithLabelValues(why).Inc()
	return endSession
}

// injectWithin writes an answer to the client, giving up (and closing the client's socket,
// which ends the session) when the client does not take it within the handshake timeout: a
// client that stops reading must not hold the filter, and with it the broker's side, forever.
func (s *session) injectWithin(toClient *sink, cmd *pb.BaseCommand) {
	stuck := time.AfterFunc(s.srv.cfg.HandshakeTimeout, toClient.close)
	defer stuck.Stop()
	toClient.inject(cmd)
}
