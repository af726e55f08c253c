package e2e

// Smoke tests of the rig itself: the brokers and Consul work as the proxy's tests expect.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/pulsar-proxy/pulsar-proxy/test/rig"
	"github.com/pulsar-proxy/pulsar-proxy/test/wait"
)

// smokeClient is a pulsar-client-go client connected straight to a broker (no proxy); it
// logs warnings and errors only.
func smokeClient(t *testing.T, url string) pulsar.Client {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := pulsar.NewClient(pulsar.ClientOptions{
		URL:               url,
		OperationTimeout:  30 * time.Second,
		ConnectionTimeout: 10 * time.Second,
		Logger:            plog.NewLoggerWithSlog(logger),
	})
	if err != nil {
		t.Fatalf("client for %s: %v", url, err)
	}
	t.Cleanup(c.Close)
	return c
}

// smokePayload returns n random bytes whose first 8 hold i (big endian).
func smokePayload(i, n int) []byte {
	p := make([]byte, max(n, 8))
	_, _ = rand.Read(p)
	binary.BigEndian.PutUint64(p, uint64(i))
	return p
}

// (a) 1,000 messages produced and consumed directly against broker 1, in order, bytes equal.
func TestRigDirectProduceConsume(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	topic := rig.UniqueTopic(t, "rig-direct")
	client := smokeClient(t, theRig.BrokerURL(1))

	consumer, err := client.Subscribe(pulsar.ConsumerOptions{
		Topic:                       topic,
		SubscriptionName:            "rig-smoke",
		Type:                        pulsar.Exclusive,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
	})
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	defer consumer.Close()
	producer, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatalf("create producer: %v", err)
	}
	defer producer.Close()

	const n = 1000
	sent := make([][]byte, n)
	errs := make(chan error, n)
	for i := range sent {
		sent[i] = smokePayload(i, 1+(i*37)%4096)
		producer.SendAsync(ctx, &pulsar.ProducerMessage{Payload: sent[i]}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			errs <- err
		})
	}
	if err := producer.FlushWithCtx(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("send: %v", err)
		}
	}

	for i := range n {
		msg, err := consumer.Receive(ctx)
		if err != nil {
			t.Fatalf("receive message %d of %d: %v", i, n, err)
		}
		if !bytes.Equal(msg.Payload(), sent[i]) {
			got := -1
			if len(msg.Payload()) >= 8 {
				got = int(binary.BigEndian.Uint64(msg.Payload()))
			}
			t.Fatalf("message %d: got %d bytes (index %d), want %d bytes", i, len(msg.Payload()), got, len(sent[i]))
		}
		if err := consumer.Ack(msg); err != nil {
			t.Fatalf("ack %d: %v", i, err)
		}
	}
	owner, err := theRig.TopicOwner(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d messages in order through broker 1; the topic is owned by broker %d", n, owner.N)
}

// (b) A 4-partition topic whose partitions are owned by both brokers, as the admin API shows.
// Placement is forced: the topic name is chosen so its partitions span at least two bundles,
// and each bundle is unloaded to a chosen broker.
func TestRigPartitionsOnBothBrokers(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	ns := "public/" + rig.UniqueName("rig-spread")
	if err := theRig.CreateNamespace(ctx, ns, 8); err != nil {
		t.Fatal(err)
	}
	const partitions = 4

	var topic rig.TopicName
	bundleOf := make([]string, partitions)
	for attempt := 0; ; attempt++ {
		var err error
		if topic, err = rig.ParseTopic("persistent://" + ns + "/" + rig.UniqueName("p4")); err != nil {
			t.Fatal(err)
		}
		distinct := map[string]bool{}
		for i := range partitions {
			if bundleOf[i], err = theRig.TopicBundle(ctx, topic.Partition(i).String()); err != nil {
				t.Fatal(err)
			}
			distinct[bundleOf[i]] = true
		}
		if len(distinct) >= 2 {
			break
		}
		if attempt == 20 {
			t.Fatalf("20 topic names all hashed their partitions into one bundle: %v", bundleOf)
		}
	}
	if err := theRig.CreatePartitionedTopic(ctx, topic.String(), partitions); err != nil {
		t.Fatal(err)
	}

	// Distinct bundles, in order, alternate between broker 1 and broker 2.
	bundles := slices.Compact(slices.Sorted(slices.Values(bundleOf)))
	want := map[string]int{}
	for j, b := range bundles {
		want[b] = 1 + j%2
	}
	for i := range partitions {
		p := topic.Partition(i).String()
		if err := theRig.PlaceTopic(ctx, p, want[bundleOf[i]]); err != nil {
			t.Fatal(err)
		}
	}

	// Produce to every partition through broker 1, so the partitions are loaded and have stats.
	client := smokeClient(t, theRig.BrokerURL(1))
	producer, err := client.CreateProducer(pulsar.ProducerOptions{
		Topic:           topic.String(),
		DisableBatching: true,
		MessageRouter: func(m *pulsar.ProducerMessage, _ pulsar.TopicMetadata) int {
			return int(m.Payload[0]) % partitions
		},
	})
	if err != nil {
		t.Fatalf("producer on %s: %v", topic, err)
	}
	for i := range 4 * partitions {
		if _, err := producer.Send(ctx, &pulsar.ProducerMessage{Payload: []byte{byte(i), 'x'}}); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	producer.Close()

	owners, err := theRig.PartitionOwners(ctx, topic.String())
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for i, o := range owners {
		p := topic.Partition(i).String()
		st, err := theRig.TopicStats(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("partition %d: bundle %s, lookup owner broker %d (%s), stats ownerBroker %s, msgIn %d",
			i, bundleOf[i], o.N, o.ID, st.OwnerBroker, st.MsgInCounter)
		if o.N != want[bundleOf[i]] {
			t.Errorf("partition %d: owned by broker %d, placed on broker %d", i, o.N, want[bundleOf[i]])
		}
		if st.OwnerBroker != o.ID {
			t.Errorf("partition %d: stats say ownerBroker %q, lookup says %q", i, st.OwnerBroker, o.ID)
		}
		if st.MsgInCounter != 4 {
			t.Errorf("partition %d: msgInCounter %d, want 4", i, st.MsgInCounter)
		}
		seen[o.N] = true
	}
	if !seen[1] || !seen[2] {
		t.Fatalf("partitions are not spread over both brokers: %v", owners)
	}
}

// (c) A raw binary LOOKUP sent to the broker that does not own a topic answers Redirect to the
// one that will. Pulsar answers Redirect while the bundle has no owner (the load manager's
// leader picks one; the other broker sends the client to the leader); once the bundle is owned,
// any broker answers Connect with the owner's URL. The bundle is freed with an unload to a chosen
// destination broker, so the outcome is fixed whichever broker leads.
func TestRigLookupRedirect(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	ns := "public/" + rig.UniqueName("rig-lookup")
	if err := theRig.CreateNamespace(ctx, ns, 4); err != nil {
		t.Fatal(err)
	}
	if leader, err := theRig.LeaderBroker(ctx); err == nil {
		t.Logf("load manager leader: broker %d", leader.N)
	}
	// The brokers' topic-policies readers look up persistent://<ns>/__change_events whenever its
	// bundle moves, and with transactions on their transaction buffers look up
	// persistent://<ns>/__transaction_buffer_snapshot whenever a topic loads; either would take
	// a freed bundle behind the test's back: avoid those bundles.
	sysBundles := map[string]bool{}
	for _, sys := range []string{"__change_events", "__transaction_buffer_snapshot"} {
		b, err := theRig.TopicBundle(ctx, "persistent://"+ns+"/"+sys)
		if err != nil {
			t.Fatal(err)
		}
		sysBundles[b] = true
	}
	for _, owner := range []int{1, 2} {
		t.Run(fmt.Sprintf("to-broker%d", owner), func(t *testing.T) {
			// A bundle freed by the test can be taken behind its back (another broker's reader
			// of some system topic, the load manager): a LOOKUP then finds it owned, which says
			// nothing about the redirect. That attempt is dropped for a topic of another
			// bundle, at most three times.
			for attempt := 1; ; attempt++ {
				if lookupRedirects(t, ctx, ns, sysBundles, owner) {
					return
				}
				if attempt == 3 {
					t.Fatalf("in %d attempts the freed bundle was always owned before the LOOKUP: the redirect could not be observed", attempt)
				}
			}
		})
	}
}

// lookupRedirects runs one attempt of TestRigLookupRedirect for the bundle of a fresh topic:
// false when the freed bundle was taken before the LOOKUP reached the other broker.
func lookupRedirects(t *testing.T, ctx context.Context, ns string, sysBundles map[string]bool, owner int) bool {
	t.Helper()
	other := 3 - owner
	topic, bundle := freeBundleTopic(t, ctx, ns, sysBundles, owner, other)
	conn := smokeConnect(t, theRig.BrokerURL(other))
	resp := smokeLookup(t, conn, topic, 7, false)
	t.Logf("LOOKUP %s at broker %d (bundle %s free): %+v", topic, other, bundle, resp)
	if resp.response == smokeLookupConnect {
		t.Logf("the bundle was owned again before the LOOKUP (%s): trying another", resp.brokerServiceURL)
		return false
	}
	if resp.response != smokeLookupRedirect {
		t.Fatalf("response type %d (%s), want Redirect (0)", resp.response, resp.message)
	}
	if resp.requestID != 7 {
		t.Errorf("request_id %d, want 7", resp.requestID)
	}
	if resp.brokerServiceURL != theRig.BrokerURL(owner) {
		t.Fatalf("redirect to %q, want broker %d %q", resp.brokerServiceURL, owner, theRig.BrokerURL(owner))
	}

	// Following the redirect as a client does: the owner takes the bundle, answers Connect.
	conn2 := smokeConnect(t, theRig.BrokerURL(owner))
	resp2 := smokeLookup(t, conn2, topic, 8, resp.authoritative)
	t.Logf("LOOKUP at broker %d (authoritative=%t): %+v", owner, resp.authoritative, resp2)
	if resp2.response == smokeLookupConnect && resp2.brokerServiceURL == theRig.BrokerURL(other) {
		t.Logf("broker %d took the bundle between the redirect and its following: trying another", other)
		return false
	}
	if resp2.response != smokeLookupConnect || resp2.brokerServiceURL != theRig.BrokerURL(owner) {
		t.Fatalf("LOOKUP at broker %d: %+v, want Connect to %s", owner, resp2, theRig.BrokerURL(owner))
	}
	otherAnswersConnect(t, conn, topic, owner, other)
	if o, err := theRig.TopicOwner(ctx, topic); err != nil || o.N != owner {
		t.Errorf("admin lookup: owner %+v (err %v), want broker %d", o, err, owner)
	}
	return true
}

// freeBundleTopic makes a topic outside sysBundles, places its bundle on broker other (so that
// it is the one that releases it: its own view of the ownership is then current when the
// LOOKUP arrives) and unloads it towards owner, leaving it free.
func freeBundleTopic(t *testing.T, ctx context.Context, ns string, sysBundles map[string]bool, owner, other int) (topic, bundle string) {
	t.Helper()
	for bundle == "" || sysBundles[bundle] {
		topic = "persistent://" + ns + "/" + rig.UniqueName("t")
		var err error
		if bundle, err = theRig.TopicBundle(ctx, topic); err != nil {
			t.Fatal(err)
		}
	}
	if err := theRig.CreateTopic(ctx, topic); err != nil {
		t.Fatal(err)
	}
	if err := theRig.PlaceTopic(ctx, topic, other); err != nil {
		t.Fatal(err)
	}
	if err := theRig.UnloadBundleTo(ctx, ns, bundle, theRig.BrokerID(owner)); err != nil {
		t.Fatal(err)
	}
	return topic, bundle
}

// otherAnswersConnect: once owned, the other broker answers Connect with the owner's URL, as
// soon as the ownership has reached its metadata cache (until then it may still redirect, or
// answer Failed).
func otherAnswersConnect(t *testing.T, conn net.Conn, topic string, owner, other int) {
	t.Helper()
	id := uint64(8)
	var resp3 smokeLookupResponse
	if !wait.Within(10*time.Second, func() bool {
		id++
		resp3 = smokeLookup(t, conn, topic, id, false)
		if resp3.response == smokeLookupConnect && resp3.brokerServiceURL == theRig.BrokerURL(owner) {
			return true
		}
		// Until then the load manager's leader may also answer Failed: it tries to take
		// the bundle itself and finds it taken ("Failed to acquire ownership").
		racing := resp3.response == smokeLookupFailed && strings.Contains(resp3.message, "Failed to acquire ownership")
		if !racing && (resp3.response != smokeLookupRedirect || resp3.brokerServiceURL != theRig.BrokerURL(owner)) {
			t.Fatalf("LOOKUP at broker %d once owned: %+v, want Connect to %s", other, resp3, theRig.BrokerURL(owner))
		}
		return false
	}) {
		t.Fatalf("LOOKUP at broker %d once owned: %+v, want Connect to %s", other, resp3, theRig.BrokerURL(owner))
	}
	t.Logf("LOOKUP at broker %d (bundle owned): %+v", other, resp3)
}

// (d) Consul answers, and a registered service comes back from /v1/health/service/<name>.
func TestRigConsul(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	leader, err := theRig.ConsulLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("consul leader %s", leader)

	name := rig.UniqueName("rig-svc")
	svc := rig.ConsulService{
		Name: name, ID: name + "-1", Address: "127.0.0.1", Port: 16650,
		Tags: []string{"pulsar", "broker1"}, Meta: map[string]string{"cluster": theRig.Cluster},
		TTL: 30 * time.Second,
	}
	if err := theRig.RegisterService(ctx, svc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = theRig.DeregisterService(context.Background(), svc.ID) })
	entries, err := theRig.HealthService(ctx, name, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Fatalf("health/service/%s?passing: %d entries, want 1", name, len(entries))
	}
	e := entries[0].Service
	if e.ID != svc.ID || e.Address != svc.Address || e.Port != svc.Port || !slices.Equal(e.Tags, svc.Tags) || e.Meta["cluster"] != theRig.Cluster {
		t.Fatalf("registered %+v, got %+v", svc, e)
	}

	// A TTL check gone critical drops it from the passing list, not from the list.
	if err := theRig.SetTTLCheck(ctx, svc.ID, "critical", "test"); err != nil {
		t.Fatal(err)
	}
	if entries, err = theRig.HealthService(ctx, name, true); err != nil || len(entries) != 0 {
		t.Fatalf("after critical: %d passing entries, err %v; want 0", len(entries), err)
	}
	if entries, err = theRig.HealthService(ctx, name, false); err != nil || len(entries) != 1 {
		t.Fatalf("after critical: %d entries, err %v; want 1", len(entries), err)
	}

	// A TCP check against broker 2's binary port turns passing.
	tcp := rig.ConsulService{Name: name + "-tcp", Address: "127.0.0.1", Port: smokePort(t, theRig.BrokerURL(2)), TCPInterval: time.Second}
	if err := theRig.RegisterService(ctx, tcp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = theRig.DeregisterService(context.Background(), tcp.Name) })
	deadline, _ := ctx.Deadline() // the test's minute
	if !wait.Within(time.Until(deadline), func() bool {
		entries, err := theRig.HealthService(ctx, tcp.Name, true)
		if err != nil {
			t.Fatal(err)
		}
		return len(entries) == 1
	}) {
		t.Fatalf("the TCP check of %s never passed", tcp.Name)
	}

	if err := theRig.DeregisterService(ctx, svc.ID); err != nil {
		t.Fatal(err)
	}
	if entries, err = theRig.HealthService(ctx, name, false); err != nil || len(entries) != 0 {
		t.Fatalf("after deregister: %d entries, err %v; want 0", len(entries), err)
	}
}

// Each broker can be stopped and started again; while one is down, the other serves its topics
// and the admin helpers keep working.
func TestRigBrokerRestart(t *testing.T) {
	for _, n := range []int{2, 1} {
		t.Run(fmt.Sprintf("broker%d", n), func(t *testing.T) { testBrokerRestart(t, n) })
	}
}

func testBrokerRestart(t *testing.T, n int) {
	other := 3 - n
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	topic := rig.UniqueTopic(t, "rig-restart")
	if err := theRig.CreateTopic(ctx, topic); err != nil {
		t.Fatal(err)
	}
	if err := theRig.PlaceTopic(ctx, topic, n); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if err := theRig.StopBroker(ctx, n); err != nil {
		t.Fatal(err)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			if err := theRig.StartBroker(context.Background(), n); err != nil {
				t.Errorf("restarting broker %d: %v", n, err)
			}
		}
	})
	t.Logf("broker %d stopped in %s", n, time.Since(t0).Round(time.Millisecond))
	ids, err := theRig.ListBrokers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids, []string{theRig.BrokerID(other)}) {
		t.Errorf("brokers with broker %d down: %v", n, ids)
	}
	owner, err := theRig.TopicOwner(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if owner.N != other {
		t.Errorf("with broker %d down, %s is owned by broker %d", n, topic, owner.N)
	}

	t0 = time.Now()
	if err := theRig.StartBroker(ctx, n); err != nil {
		t.Fatal(err)
	}
	restarted = true
	t.Logf("broker %d started again in %s", n, time.Since(t0).Round(time.Millisecond))
	ids, err = theRig.ListBrokers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(ids)
	if want := []string{theRig.BrokerID(1), theRig.BrokerID(2)}; !slices.Equal(ids, want) {
		t.Errorf("brokers after restart: %v, want %v", ids, want)
	}
	if err := theRig.PlaceTopic(ctx, topic, n); err != nil {
		t.Fatalf("placing a topic on the restarted broker: %v", err)
	}
}

func smokePort(t *testing.T, url string) int {
	t.Helper()
	_, port, err := net.SplitHostPort(strings.TrimPrefix(url, "pulsar://"))
	if err != nil {
		t.Fatal(err)
	}
	var p int
	if _, err := fmt.Sscan(port, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

// ---- A hand-rolled encoder for the two Pulsar commands this file needs ----
//
// Frame: [u32 totalSize][u32 commandSize][BaseCommand], totalSize = 4 + commandSize.
// BaseCommand: type = field 1; the sub-message's field number equals its type.

const (
	smokeCmdConnect        = 2
	smokeCmdConnected      = 3
	smokeCmdError          = 13
	smokeCmdPing           = 18
	smokeCmdPong           = 19
	smokeCmdLookup         = 23
	smokeCmdLookupResponse = 24

	smokeLookupRedirect = 0
	smokeLookupConnect  = 1
	smokeLookupFailed   = 2
)

func smokeFrame(cmdType protowire.Number, sub []byte) []byte {
	var cmd []byte
	cmd = protowire.AppendTag(cmd, 1, protowire.VarintType)
	cmd = protowire.AppendVarint(cmd, uint64(cmdType))
	if sub != nil {
		cmd = protowire.AppendTag(cmd, cmdType, protowire.BytesType)
		cmd = protowire.AppendBytes(cmd, sub)
	}
	out := binary.BigEndian.AppendUint32(nil, uint32(4+len(cmd)))
	out = binary.BigEndian.AppendUint32(out, uint32(len(cmd)))
	return append(out, cmd...)
}

func smokeEncodeConnect() []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType) // client_version
	b = protowire.AppendString(b, "pulsar-proxy-e2e")
	b = protowire.AppendTag(b, 4, protowire.VarintType) // protocol_version
	b = protowire.AppendVarint(b, 20)
	return smokeFrame(smokeCmdConnect, b)
}

func smokeEncodeLookup(topic string, requestID uint64, authoritative bool) []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType) // topic
	b = protowire.AppendString(b, topic)
	b = protowire.AppendTag(b, 2, protowire.VarintType) // request_id
	b = protowire.AppendVarint(b, requestID)
	b = protowire.AppendTag(b, 3, protowire.VarintType) // authoritative
	b = protowire.AppendVarint(b, protowire.EncodeBool(authoritative))
	return smokeFrame(smokeCmdLookup, b)
}

// smokeFields decodes one protobuf message into field number → raw values (varints as uint64,
// length-delimited as []byte).
func smokeFields(b []byte) (map[protowire.Number][]any, error) {
	out := map[protowire.Number][]any{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
		switch typ {
		case protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return nil, protowire.ParseError(n)
			}
			out[num] = append(out[num], v)
			b = b[n:]
		case protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil, protowire.ParseError(n)
			}
			out[num] = append(out[num], v)
			b = b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return nil, protowire.ParseError(n)
			}
			b = b[n:]
		}
	}
	return out, nil
}

func smokeVarint(f map[protowire.Number][]any, n protowire.Number) uint64 {
	if v, ok := f[n]; ok {
		if u, ok := v[0].(uint64); ok {
			return u
		}
	}
	return 0
}

func smokeString(f map[protowire.Number][]any, n protowire.Number) string {
	if v, ok := f[n]; ok {
		if b, ok := v[0].([]byte); ok {
			return string(b)
		}
	}
	return ""
}

// smokeReadCommand reads one frame and returns its type and sub-message fields.
func smokeReadCommand(r io.Reader) (uint64, map[protowire.Number][]any, error) {
	var hdr [8]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	total, cmdSize := binary.BigEndian.Uint32(hdr[:4]), binary.BigEndian.Uint32(hdr[4:])
	if total > 5<<20 || cmdSize+4 > total {
		return 0, nil, fmt.Errorf("bad frame sizes total=%d command=%d", total, cmdSize)
	}
	body := make([]byte, total-4)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, nil, err
	}
	base, err := smokeFields(body[:cmdSize])
	if err != nil {
		return 0, nil, err
	}
	typ := smokeVarint(base, 1)
	var sub map[protowire.Number][]any
	if v, ok := base[protowire.Number(typ)]; ok {
		if b, ok := v[0].([]byte); ok {
			if sub, err = smokeFields(b); err != nil {
				return 0, nil, err
			}
		}
	}
	return typ, sub, nil
}

// smokeConnect opens a TCP connection to a broker and completes CONNECT/CONNECTED.
func smokeConnect(t *testing.T, url string) net.Conn {
	t.Helper()
	addr := strings.TrimPrefix(url, "pulsar://")
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := conn.Write(smokeEncodeConnect()); err != nil {
		t.Fatal(err)
	}
	typ, sub, err := smokeReadCommand(conn)
	if err != nil {
		t.Fatalf("reading CONNECTED from %s: %v", addr, err)
	}
	if typ != smokeCmdConnected {
		t.Fatalf("after CONNECT %s answered command type %d (%v), want CONNECTED", addr, typ, sub)
	}
	return conn
}

type smokeLookupResponse struct {
	brokerServiceURL string
	response         uint64
	requestID        uint64
	authoritative    bool
	message          string
}

// smokeLookup sends LOOKUP and waits for its LOOKUP_RESPONSE.
func smokeLookup(t *testing.T, conn net.Conn, topic string, requestID uint64, authoritative bool) smokeLookupResponse {
	t.Helper()
	if _, err := conn.Write(smokeEncodeLookup(topic, requestID, authoritative)); err != nil {
		t.Fatal(err)
	}
	for {
		typ, sub, err := smokeReadCommand(conn)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("no LOOKUP_RESPONSE for %s", topic)
			}
			t.Fatal(err)
		}
		switch typ {
		case smokeCmdPing:
			if _, err := conn.Write(smokeFrame(smokeCmdPong, []byte{})); err != nil {
				t.Fatal(err)
			}
		case smokeCmdError:
			t.Fatalf("broker answered ERROR: %s", smokeString(sub, 3))
		case smokeCmdLookupResponse:
			r := smokeLookupResponse{
				brokerServiceURL: smokeString(sub, 1),
				response:         smokeVarint(sub, 3),
				requestID:        smokeVarint(sub, 4),
				authoritative:    smokeVarint(sub, 5) != 0,
				message:          smokeString(sub, 7),
			}
			if r.requestID == requestID {
				return r
			}
		}
	}
}
