package session

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

	"github.com/pulsar-proxy/pulsar-proxy/frame/pb"
)

// Bounds on what a session keeps for topic-list watchers: a client opens one watcher per
// pattern consumer, and a namespace's list is what the client holds anyway.
const (
	maxWatchersPerSession = 64
	maxWatchedTopics      = 100_000 // over all watchers of a session
)

var errTooManyWatchedTopics = errors.New("topic-list watchers of this connection hold too many topics")

// topicLists filters the topic lists a broker sends a direct session's client
// (GET_TOPICS_OF_NAMESPACE answers, topic-list watchers) down to the topics the client may
// look up. A watcher's updates carry the hash of the whole list, so each watcher's filtered
// list is kept to hash the list the client really holds.
type topicLists struct {
	visible func(topic string) bool
	active  prometheus.Gauge // watchers open, all sessions together; nil: not counted

	mu       sync.Mutex
	watchers map[uint64]map[string]struct{} // by watcher id; nil set: opened, no answer yet
	topics   int
}

func newTopicLists(visible func(string) bool) *topicLists {
	return &topicLists{visible: visible, watchers: map[uint64]map[string]struct{}{}}
}

// counted makes the lists count their watchers in g.
func (l *topicLists) counted(g prometheus.Gauge) *topicLists {
	l.active = g
	return l
}

// watch registers a watcher the client opens; false when the session has too many.
func (l *topicLists) watch(id uint64) bool {
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

// forget drops a watcher the client closed.
func (l *topicLists) forget(id uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, known := l.watchers[id]; known && l.active != nil {
		l.active.Dec()
	}
	l.forgetLocked(id)
	delete(l.watchers, id)
}

// close drops every watcher: the session ended, and the broker with it.
func (l *topicLists) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.active != nil {
		l.active.Sub(float64(len(l.watchers)))
	}
	clear(l.watchers)
	l.topics = 0
}

func (l *topicLists) forgetLocked(id uint64) {
	l.topics -= len(l.watchers[id])
}

// filter rewrites a broker's topic-list answer in place to what the client may see. It
// reports whether anything is left to send (an update whose topics are all hidden is not).
func (l *topicLists) filter(cmd *pb.BaseCommand) (send bool, err error) {
	switch cmd.GetType() {
	case pb.BaseCommand_GET_TOPICS_OF_NAMESPACE_RESPONSE:
		r := cmd.GetGetTopicsOfNamespaceResponse()
		if kept := l.keep(r.Topics); len(kept) != len(r.Topics) {
			r.Topics = kept
			r.TopicsHash = proto.String(topicsHash(kept))
		}
		return true, nil
	case pb.BaseCommand_WATCH_TOPIC_LIST_SUCCESS:
		return true, l.listed(cmd.GetWatchTopicListSuccess())
	case pb.BaseCommand_WATCH_TOPIC_UPDATE:
		return l.updated(cmd.GetWatchTopicUpdate())
	}
	return true, nil
}

func (l *topicLists) listed(w *pb.CommandWatchTopicListSuccess) error {
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
	w.TopicsHash = proto.String(topicsHash(w.Topic))
	return nil
}

func (l *topicLists) updated(u *pb.CommandWatchTopicUpdate) (bool, error) {
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
	u.TopicsHash = proto.String(topicsHash(all))
	return true, nil
}

func (l *topicLists) keep(topics []string) []string {
	return slices.DeleteFunc(topics, func(t string) bool { return !l.visible(t) })
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// topicsHash is the hash Pulsar gives a topic list (TopicList.calculateHash): CRC32C of the
// sorted names joined by ",", written as the hex of its little-endian bytes. A client
// compares it with what it holds, so a filtered list must carry its own.
func topicsHash(topics []string) string {
	sorted := slices.Clone(topics)
	sort.Strings(sorted)
	sum := crc32.Checksum([]byte(strings.Join(sorted, ",")), castagnoli)
	var le [4]byte
	binary.LittleEndian.PutUint32(le[:], sum)
	return hex.EncodeToString(le[:])
}
