package edge

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/pulsar-proxy/pulsar-proxy/authn"
	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// Bounds on what a session keeps for topic-list watchers: a client opens one watcher per
// pattern consumer, and a namespace's list is what the client holds anyway.
const (
	maxWatchersPerSession = 64
	maxWatchedTopics      = 100_000 // over all watchers of a session
)

var errTooManyWatchedTopics = errors.New("topic-list watchers of this connection hold too many topics")

// TopicLists filters the topic lists a broker sends one client, on any binary plane
// (GET_TOPICS_OF_NAMESPACE answers, topic-list watchers), down to the topics the client may
// look up, each with the hash of what it really holds. A watcher's updates carry the hash of
// the whole list, so each watcher's filtered list is kept to hash it. It also bounds the
// watchers a session may hold, with or without a policy.
type TopicLists struct {
	visible func(topic string) bool
	active  prometheus.Gauge // watchers open, all sessions together; nil: not counted

	mu       sync.Mutex
	watchers map[uint64]map[string]struct{} // by watcher id; nil set: opened, no answer yet
	topics   int
}

// TopicLists makes a client's lists; id is who the client is now (credentials may be renewed).
// Without a policy nothing is hidden.
func (e *Edge) TopicLists(id func() authn.Identity) *TopicLists {
	return &TopicLists{visible: func(t string) bool { return e.Visible(id(), t) }, watchers: map[uint64]map[string]struct{}{}}
}

func newTopicLists(visible func(string) bool) *TopicLists {
	return &TopicLists{visible: visible, watchers: map[uint64]map[string]struct{}{}}
}

// Counted makes the lists count their watchers in g.
func (l *TopicLists) Counted(g prometheus.Gauge) *TopicLists {
	l.active = g
	return l
}

// Watch registers a watcher the client opens; false when the session has too many.
func (l *TopicLists) Watch(id uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, known := l.watchers[id]
	if !known && len(l.watchers) >= maxWatchersPerSession {
		return false
	}
	l.forgetLocked(id)
	l.watchers[id] = nil
	if !known && l.active != nil {
		l.active.Inc()
	}
	return true
}

// Forget drops a watcher the client closed.
func (l *TopicLists) Forget(id uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, known := l.watchers[id]; known && l.active != nil {
		l.active.Dec()
	}
	l.forgetLocked(id)
	delete(l.watchers, id)
}

// Close drops every watcher: the session ended, and the broker with it.
func (l *TopicLists) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.active != nil {
		l.active.Sub(float64(len(l.watchers)))
	}
	clear(l.watchers)
	l.topics = 0
}

func (l *TopicLists) forgetLocked(id uint64) {
	l.topics -= len(l.watchers[id])
}

// Carries reports whether a broker command of type t carries a topic list for Filter.
func Carries(t pb.BaseCommand_Type) bool {
	return t == pb.BaseCommand_GET_TOPICS_OF_NAMESPACE_RESPONSE || t == pb.BaseCommand_WATCH_TOPIC_LIST_SUCCESS ||
		t == pb.BaseCommand_WATCH_TOPIC_UPDATE
}

// Filter rewrites a broker's topic-list answer in place to what the client may see, with
// the hash of that list (never the broker's, which covers names the client may not see).
// It reports whether anything is left to send (an update whose topics are all hidden is
// not).
func (l *TopicLists) Filter(cmd *pb.BaseCommand) (send bool, err error) {
	switch cmd.GetType() {
	case pb.BaseCommand_GET_TOPICS_OF_NAMESPACE_RESPONSE:
		r := cmd.GetGetTopicsOfNamespaceResponse()
		r.Topics = l.keep(r.Topics)
		if r.GetChanged() {
			r.TopicsHash = proto.String(TopicsHash(r.Topics))
		}
		return true, nil
	case pb.BaseCommand_WATCH_TOPIC_LIST_SUCCESS:
		return true, l.listed(cmd.GetWatchTopicListSuccess())
	case pb.BaseCommand_WATCH_TOPIC_UPDATE:
		return l.updated(cmd.GetWatchTopicUpdate())
	}
	return true, nil
}

func (l *TopicLists) listed(w *pb.CommandWatchTopicListSuccess) error {
	w.Topic = l.keep(w.Topic)
	set := make(map[string]struct{}, len(w.Topic))
	for _, t := range w.Topic {
		set[t] = struct{}{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.forgetLocked(w.GetWatcherId())
	if l.topics+len(set) > maxWatchedTopics {
		return errTooManyWatchedTopics
	}
	l.watchers[w.GetWatcherId()] = set
	l.topics += len(set)
	w.TopicsHash = proto.String(TopicsHash(w.Topic))
	return nil
}

func (l *TopicLists) updated(u *pb.CommandWatchTopicUpdate) (bool, error) {
	u.NewTopics, u.DeletedTopics = l.keep(u.NewTopics), l.keep(u.DeletedTopics)
	l.mu.Lock()
	defer l.mu.Unlock()
	set, ok := l.watchers[u.GetWatcherId()]
	if !ok || set == nil || len(u.NewTopics)+len(u.DeletedTopics) == 0 {
		return false, nil // nothing the client may see, or a watcher it never opened here
	}
	for _, t := range u.DeletedTopics {
		if _, had := set[t]; had {
			delete(set, t)
			l.topics--
		}
	}
	for _, t := range u.NewTopics {
		if _, had := set[t]; !had {
			set[t] = struct{}{}
			l.topics++
		}
	}
	if l.topics > maxWatchedTopics {
		return false, errTooManyWatchedTopics
	}
	all := make([]string, 0, len(set))
	for t := range set {
		all = append(all, t)
	}
	u.TopicsHash = proto.String(TopicsHash(all))
	return true, nil
}

func (l *TopicLists) keep(topics []string) []string {
	return slices.DeleteFunc(topics, func(t string) bool { return !l.visible(t) })
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// TopicsHash is the hash Pulsar gives a topic list (TopicList.calculateHash): CRC32C of the
// sorted names joined by ",", written as the hex of its little-endian bytes. A client
// compares it with what it holds, so a filtered list must carry its own.
func TopicsHash(topics []string) string {
	sorted := slices.Clone(topics)
	sort.Strings(sorted)
	sum := crc32.Checksum([]byte(strings.Join(sorted, ",")), castagnoli)
	var le [4]byte
	binary.LittleEndian.PutUint32(le[:], sum)
	return hex.EncodeToString(le[:])
}

// Track notes a client's WATCH_TOPIC_LIST or WATCH_TOPIC_LIST_CLOSE on its way to a broker.
// It returns the refusal to answer instead when the client holds as many watchers as a
// session may (the command then goes no further); nil otherwise.
func (l *TopicLists) Track(cmd *pb.BaseCommand) *pb.BaseCommand {
	if w := cmd.GetWatchTopicList(); w != nil && !l.Watch(w.GetWatcherId()) {
		return FailureFor(cmd, pb.ServerError_TooManyRequests, "pulsar-proxy: too many topic-list watchers on this connection")
	}
	if c := cmd.GetWatchTopicListClose(); c != nil {
		l.Forget(c.GetWatcherId())
	}
	return nil
}
