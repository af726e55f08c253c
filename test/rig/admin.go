package rig

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"
)

// HTTPError is a REST call that got a non-2xx answer.
type HTTPError struct {
	Method, URL string
	Status      int
	Body        string
}

func (e *HTTPError) Error() string {
	body := strings.TrimSpace(e.Body)
	if len(body) > 2000 {
		body = body[:2000] + "..."
	}
	return fmt.Sprintf("%s %s: %d %s: %s", e.Method, e.URL, e.Status, http.StatusText(e.Status), body)
}

// IsStatus reports whether err is an *HTTPError with this status (e.g. 409 for "already exists").
func IsStatus(err error, status int) bool {
	var he *HTTPError
	return errors.As(err, &he) && he.Status == status
}

// doURL sends a request; body is marshalled to JSON unless it is a []byte or string. out, when
// non-nil, gets the JSON-decoded answer, or the raw body when it is a *[]byte. Redirects (307)
// are followed with the same method and body.
func (r *Rig) doURL(ctx context.Context, method, u string, body, out any) error {
	var rd io.Reader
	var raw []byte
	if body != nil {
		switch b := body.(type) {
		case []byte:
			raw = b
		case string:
			raw = []byte(b)
		default:
			var err error
			if raw, err = json.Marshal(b); err != nil {
				return err
			}
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if r.opts.AdminToken != "" {
		req.Header.Set("Authorization", "Bearer "+r.opts.AdminToken)
	}
	client := r.client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, u, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s %s: reading the answer: %w", method, u, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return &HTTPError{Method: method, URL: u, Status: resp.StatusCode, Body: string(data)}
	}
	switch o := out.(type) {
	case nil:
	case *[]byte:
		*o = data
	default:
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%s %s: decoding %q: %w", method, u, data, err)
		}
	}
	return nil
}

// admin sends a request to the web service of a running broker (broker 1 unless it is
// stopped), which redirects to the owner or the leader where needed.
func (r *Rig) admin(ctx context.Context, method, path string, body, out any) error {
	return r.doURL(ctx, method, r.adminBroker().HTTP+path, body, out)
}

// Admin sends one admin REST request (path from /admin/v2/...) to the rig's web service as
// the helpers below do, for the calls they do not cover (e.g. registering another cluster).
func (r *Rig) Admin(ctx context.Context, method, path string, body, out any) error {
	return r.admin(ctx, method, path, body, out)
}

// adminBroker is broker 1, or broker 2 while broker 1 is stopped (StopBroker).
func (r *Rig) adminBroker() Broker {
	for _, b := range r.Brokers {
		if r.State(fmt.Sprintf("BROKER%d_PID", b.N)) != "" {
			return b
		}
	}
	return r.Brokers[0]
}

// TopicName is a parsed Pulsar topic name.
type TopicName struct {
	Domain, Tenant, Namespace, Local string
}

// ParseTopic accepts persistent://t/ns/x, non-persistent://t/ns/x, t/ns/x and x (public/default).
func ParseTopic(topic string) (TopicName, error) {
	tn := TopicName{Domain: "persistent"}
	rest := topic
	if d, r, ok := strings.Cut(topic, "://"); ok {
		tn.Domain, rest = d, r
	}
	parts := strings.SplitN(rest, "/", 3)
	switch len(parts) {
	case 1:
		tn.Tenant, tn.Namespace, tn.Local = "public", "default", parts[0]
	case 3:
		tn.Tenant, tn.Namespace, tn.Local = parts[0], parts[1], parts[2]
	default:
		return tn, fmt.Errorf("rig: topic %q is not domain://tenant/namespace/topic", topic)
	}
	if tn.Tenant == "" || tn.Namespace == "" || tn.Local == "" || (tn.Domain != "persistent" && tn.Domain != "non-persistent") {
		return tn, fmt.Errorf("rig: bad topic name %q", topic)
	}
	return tn, nil
}

// String is the full name, persistent://t/ns/x.
func (t TopicName) String() string {
	return t.Domain + "://" + t.Tenant + "/" + t.Namespace + "/" + t.Local
}

// NamespaceName is tenant/namespace.
func (t TopicName) NamespaceName() string { return t.Tenant + "/" + t.Namespace }

// Partition is the name of partition i of this (partitioned) topic.
func (t TopicName) Partition(i int) TopicName {
	t.Local = fmt.Sprintf("%s-partition-%d", t.Local, i)
	return t
}

// path is domain/tenant/namespace/escaped-local, as the REST paths want it.
func (t TopicName) path() string {
	return t.Domain + "/" + t.Tenant + "/" + t.Namespace + "/" + url.PathEscape(t.Local)
}

func topicPath(topic string) (string, error) {
	tn, err := ParseTopic(topic)
	if err != nil {
		return "", err
	}
	return tn.path(), nil
}

func nsPath(ns string) (string, error) {
	t, n, ok := strings.Cut(ns, "/")
	if !ok || t == "" || n == "" || strings.Contains(n, "/") {
		return "", fmt.Errorf("rig: namespace %q is not tenant/namespace", ns)
	}
	return url.PathEscape(t) + "/" + url.PathEscape(n), nil
}

var unsafeName = regexp.MustCompile(`[^a-zA-Z0-9_-]+`)

// UniqueName returns prefix-<8 random hex digits>, safe as a tenant, namespace or topic name.
func UniqueName(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	prefix = unsafeName.ReplaceAllString(prefix, "-")
	return prefix + "-" + hex.EncodeToString(b[:])
}

// UniqueTopic returns persistent://public/default/<prefix>-<random>, a name no other test uses.
func UniqueTopic(t testing.TB, prefix string) string {
	t.Helper()
	name := "persistent://public/default/" + UniqueName(prefix)
	t.Logf("topic %s", name)
	return name
}

// CreateTenant creates a tenant allowed on the rig's cluster.
func (r *Rig) CreateTenant(ctx context.Context, tenant string, adminRoles ...string) error {
	if adminRoles == nil {
		adminRoles = []string{}
	}
	body := map[string]any{"adminRoles": adminRoles, "allowedClusters": []string{r.Cluster}}
	return r.admin(ctx, http.MethodPut, "/admin/v2/tenants/"+url.PathEscape(tenant), body, nil)
}

// CreateNamespace creates tenant/namespace with this many bundles (0: the broker default, 4).
func (r *Rig) CreateNamespace(ctx context.Context, ns string, bundles int) error {
	p, err := nsPath(ns)
	if err != nil {
		return err
	}
	body := map[string]any{}
	if bundles > 0 {
		body["bundles"] = map[string]int{"numBundles": bundles}
	}
	return r.admin(ctx, http.MethodPut, "/admin/v2/namespaces/"+p, body, nil)
}

// CreateNamespaceV1 creates tenant/cluster/namespace through the v1 admin API: a namespace
// of the rig's cluster whose topics' names carry the cluster (persistent://t/c/ns/x), as the
// v1 paths of the WebSocket API name them. One that exists already is no error.
func (r *Rig) CreateNamespaceV1(ctx context.Context, tenant, namespace string) error {
	p := url.PathEscape(tenant) + "/" + url.PathEscape(r.Cluster) + "/" + url.PathEscape(namespace)
	err := r.admin(ctx, http.MethodPut, "/admin/namespaces/"+p, map[string]any{}, nil)
	if IsStatus(err, http.StatusConflict) {
		return nil
	}
	return err
}

// CreatePartitionedTopic creates a partitioned topic.
func (r *Rig) CreatePartitionedTopic(ctx context.Context, topic string, partitions int) error {
	p, err := topicPath(topic)
	if err != nil {
		return err
	}
	return r.admin(ctx, http.MethodPut, "/admin/v2/"+p+"/partitions", fmt.Sprint(partitions), nil)
}

// Partitions returns the partition count of a topic (0 for a non-partitioned one).
func (r *Rig) Partitions(ctx context.Context, topic string) (int, error) {
	p, err := topicPath(topic)
	if err != nil {
		return 0, err
	}
	var meta struct {
		Partitions int `json:"partitions"`
	}
	err = r.admin(ctx, http.MethodGet, "/admin/v2/"+p+"/partitions", nil, &meta)
	return meta.Partitions, err
}

// CreateTopic creates a non-partitioned topic (which also assigns its bundle to a broker).
func (r *Rig) CreateTopic(ctx context.Context, topic string) error {
	p, err := topicPath(topic)
	if err != nil {
		return err
	}
	return r.admin(ctx, http.MethodPut, "/admin/v2/"+p, []byte{}, nil)
}

// DeleteTopic deletes a non-partitioned topic (force: even with producers or consumers).
func (r *Rig) DeleteTopic(ctx context.Context, topic string, force bool) error {
	p, err := topicPath(topic)
	if err != nil {
		return err
	}
	return r.admin(ctx, http.MethodDelete, fmt.Sprintf("/admin/v2/%s?force=%t", p, force), nil, nil)
}

// DeletePartitionedTopic deletes a partitioned topic and its partitions (force: even with
// producers or consumers).
func (r *Rig) DeletePartitionedTopic(ctx context.Context, topic string, force bool) error {
	p, err := topicPath(topic)
	if err != nil {
		return err
	}
	return r.admin(ctx, http.MethodDelete, fmt.Sprintf("/admin/v2/%s/partitions?force=%t", p, force), nil, nil)
}

// UnloadTopic closes the topic on its broker (its clients reconnect); ownership stays.
func (r *Rig) UnloadTopic(ctx context.Context, topic string) error {
	p, err := topicPath(topic)
	if err != nil {
		return err
	}
	return r.admin(ctx, http.MethodPut, "/admin/v2/"+p+"/unload", []byte{}, nil)
}

// TerminateTopic terminates a non-partitioned topic: no more messages can be published, and
// consumers that have read everything are told ReachedEndOfTopic.
func (r *Rig) TerminateTopic(ctx context.Context, topic string) error {
	p, err := topicPath(topic)
	if err != nil {
		return err
	}
	return r.admin(ctx, http.MethodPost, "/admin/v2/"+p+"/terminate", []byte{}, nil)
}

// GrantNamespacePermission grants role actions ("produce", "consume", ...) on tenant/namespace.
func (r *Rig) GrantNamespacePermission(ctx context.Context, ns, role string, actions ...string) error {
	p, err := nsPath(ns)
	if err != nil {
		return err
	}
	return r.admin(ctx, http.MethodPost, "/admin/v2/namespaces/"+p+"/permissions/"+url.PathEscape(role), actions, nil)
}

// GrantTopicPermission grants role actions on one topic.
func (r *Rig) GrantTopicPermission(ctx context.Context, topic, role string, actions ...string) error {
	p, err := topicPath(topic)
	if err != nil {
		return err
	}
	return r.admin(ctx, http.MethodPost, "/admin/v2/"+p+"/permissions/"+url.PathEscape(role), actions, nil)
}

// LeaderBroker returns the broker that is the load manager's leader (it assigns unowned
// bundles; the other broker redirects lookups of unowned bundles to it).
func (r *Rig) LeaderBroker(ctx context.Context) (Broker, error) {
	var info struct {
		BrokerID   string `json:"brokerId"`
		ServiceURL string `json:"serviceUrl"`
	}
	if err := r.admin(ctx, http.MethodGet, "/admin/v2/brokers/leaderBroker", nil, &info); err != nil {
		return Broker{}, err
	}
	for _, u := range []string{info.BrokerID, info.ServiceURL} {
		if b, ok := r.BrokerByURL(u); ok {
			return b, nil
		}
	}
	return Broker{}, fmt.Errorf("rig: the leader %+v is not a rig broker", info)
}

// ListBrokers returns the ids of the active brokers of the cluster.
func (r *Rig) ListBrokers(ctx context.Context) ([]string, error) {
	var ids []string
	err := r.admin(ctx, http.MethodGet, "/admin/v2/brokers/"+url.PathEscape(r.Cluster), nil, &ids)
	return ids, err
}

// LookupData is the answer of the HTTP lookup.
type LookupData struct {
	BrokerURL    string `json:"brokerUrl"`
	BrokerURLTLS string `json:"brokerUrlTls"`
	HTTPURL      string `json:"httpUrl"`
	HTTPURLTLS   string `json:"httpUrlTls"`
	NativeURL    string `json:"nativeUrl"`
}

// Lookup runs GET /lookup/v2/topic/... (through broker 1 unless it is stopped), following
// redirects. A lookup assigns the topic's bundle to a broker when nobody owns it.
func (r *Rig) Lookup(ctx context.Context, topic string) (LookupData, error) {
	var ld LookupData
	p, err := topicPath(topic)
	if err != nil {
		return ld, err
	}
	// A lookup that assigns a bundle both brokers are taking at once is answered 500 ("Failed
	// to acquire ownership"); the next one finds the owner. A few tries, a second apart.
	for attempt := 1; ; attempt++ {
		err = r.admin(ctx, http.MethodGet, "/lookup/v2/topic/"+p, nil, &ld)
		if attempt == 5 || !IsStatus(err, http.StatusInternalServerError) || !strings.Contains(err.Error(), "acquire ownership") {
			return ld, err
		}
		select {
		case <-ctx.Done():
			return ld, err
		case <-time.After(time.Second):
		}
	}
}

// TopicOwner returns the broker that owns the topic (looking it up, which assigns an owner if
// there was none).
func (r *Rig) TopicOwner(ctx context.Context, topic string) (Broker, error) {
	ld, err := r.Lookup(ctx, topic)
	if err != nil {
		return Broker{}, err
	}
	b, ok := r.BrokerByURL(ld.BrokerURL)
	if !ok {
		return Broker{}, fmt.Errorf("rig: lookup of %s answered %q, which is not a rig broker", topic, ld.BrokerURL)
	}
	return b, nil
}

// PartitionOwners returns the owner of each partition of a partitioned topic, by index.
func (r *Rig) PartitionOwners(ctx context.Context, topic string) ([]Broker, error) {
	tn, err := ParseTopic(topic)
	if err != nil {
		return nil, err
	}
	n, err := r.Partitions(ctx, topic)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, fmt.Errorf("rig: %s is not a partitioned topic", topic)
	}
	owners := make([]Broker, n)
	for i := range owners {
		if owners[i], err = r.TopicOwner(ctx, tn.Partition(i).String()); err != nil {
			return nil, err
		}
	}
	return owners, nil
}

// TopicBundle returns the namespace bundle (e.g. 0x40000000_0x80000000) the topic hashes to.
func (r *Rig) TopicBundle(ctx context.Context, topic string) (string, error) {
	p, err := topicPath(topic)
	if err != nil {
		return "", err
	}
	var body []byte
	if err := r.admin(ctx, http.MethodGet, "/lookup/v2/topic/"+p+"/bundle", nil, &body); err != nil {
		return "", err
	}
	return strings.Trim(strings.TrimSpace(string(body)), `"`), nil
}

// NamespaceBundles returns the bundle ranges of tenant/namespace.
func (r *Rig) NamespaceBundles(ctx context.Context, ns string) ([]string, error) {
	p, err := nsPath(ns)
	if err != nil {
		return nil, err
	}
	var b struct {
		Boundaries []string `json:"boundaries"`
	}
	if err := r.admin(ctx, http.MethodGet, "/admin/v2/namespaces/"+p+"/bundles", nil, &b); err != nil {
		return nil, err
	}
	var out []string
	for i := 0; i+1 < len(b.Boundaries); i++ {
		out = append(out, b.Boundaries[i]+"_"+b.Boundaries[i+1])
	}
	return out, nil
}

// UnloadBundleTo unloads a bundle of tenant/namespace and asks the load manager to give it to
// brokerID next (the next lookup of a topic in it assigns it there). It works on unowned
// bundles too.
func (r *Rig) UnloadBundleTo(ctx context.Context, ns, bundle, brokerID string) error {
	p, err := nsPath(ns)
	if err != nil {
		return err
	}
	q := "/admin/v2/namespaces/" + p + "/" + url.PathEscape(bundle) + "/unload"
	if brokerID != "" {
		q += "?destinationBroker=" + url.QueryEscape(brokerID)
	}
	return r.admin(ctx, http.MethodPut, q, []byte{}, nil)
}

// PlaceTopic makes broker n own the topic's bundle (and so the topic, and every other topic of
// that bundle): it unloads the bundle to that broker and looks the topic up until the owner is
// right. It fails after about 30 s.
func (r *Rig) PlaceTopic(ctx context.Context, topic string, n int) error {
	want := r.Broker(n)
	tn, err := ParseTopic(topic)
	if err != nil {
		return err
	}
	bundle, err := r.TopicBundle(ctx, topic)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	var last string
	for attempt := 1; ; attempt++ {
		owner, err := r.TopicOwner(ctx, topic)
		if err == nil && owner.N == n {
			return nil
		}
		if err != nil {
			last = err.Error()
		} else {
			last = "owned by broker " + fmt.Sprint(owner.N)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("rig: could not place %s (bundle %s) on broker %d after %d attempts: %s", topic, bundle, n, attempt, last)
		}
		if err := r.UnloadBundleTo(ctx, tn.NamespaceName(), bundle, want.ID); err != nil {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
		}
	}
}

// TopicStats is part of the answer of GET .../stats; Raw has all of it.
type TopicStats struct {
	MsgInCounter  int64  `json:"msgInCounter"`
	MsgOutCounter int64  `json:"msgOutCounter"`
	OwnerBroker   string `json:"ownerBroker"`
	Publishers    []struct {
		ProducerName  string `json:"producerName"`
		Address       string `json:"address"`
		ClientVersion string `json:"clientVersion"`
	} `json:"publishers"`
	Subscriptions map[string]struct {
		MsgBacklog int64 `json:"msgBacklog"`
		Consumers  []struct {
			ConsumerName  string `json:"consumerName"`
			Address       string `json:"address"`
			ClientVersion string `json:"clientVersion"`
		} `json:"consumers"`
	} `json:"subscriptions"`
	Raw json.RawMessage `json:"-"`
}

// TopicStats returns the stats of a non-partitioned topic or of one partition.
func (r *Rig) TopicStats(ctx context.Context, topic string) (*TopicStats, error) {
	p, err := topicPath(topic)
	if err != nil {
		return nil, err
	}
	var raw []byte
	if err := r.admin(ctx, http.MethodGet, "/admin/v2/"+p+"/stats", nil, &raw); err != nil {
		return nil, err
	}
	st := &TopicStats{Raw: raw}
	if err := json.Unmarshal(raw, st); err != nil {
		return nil, fmt.Errorf("rig: decoding stats of %s: %w", topic, err)
	}
	return st, nil
}

// TransactionCoordinatorTopic is the partitioned topic whose partition N stands for
// transaction coordinator N: its owner runs that coordinator (RIG_TRANSACTIONS=1).
const TransactionCoordinatorTopic = "persistent://pulsar/system/transaction_coordinator_assign"

// CreateSubscription creates subscription sub on a non-partitioned topic at its end (the
// messages produced after it are its backlog).
func (r *Rig) CreateSubscription(ctx context.Context, topic, sub string) error {
	p, err := topicPath(topic)
	if err != nil {
		return err
	}
	return r.admin(ctx, http.MethodPut, "/admin/v2/"+p+"/subscription/"+url.PathEscape(sub), []byte{}, nil)
}
