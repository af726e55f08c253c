package e2e

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"

	"github.com/pulsar-proxy/pulsar-proxy/test/rig"
)

// txnPerPartition is how many messages a transaction produces to each partition.
const txnPerPartition = 10

// txnTarget is where a transaction test's client connects: straight to a broker, or a proxy.
type txnTarget struct {
	name, url string
	proxy     *proxy // nil for the broker
}

// txnTargets are the targets of every transaction test, the test body the same for all: broker
// 1 itself (the reference); the proxy in front of both brokers, forwarding undecoded; and a
// proxy that inspects every client command (authorization on, clients given a role without
// credentials), so the transaction commands pass its client rules (session/clientrules.go).
func txnTargets(t *testing.T) []txnTarget {
	plain := startProxy(t, brokerURLs(), "")
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	// Transactions need lookup of the coordinators' topic, whose owners run them.
	err := os.WriteFile(policy, []byte(`rules:
  - roles: [txn-user]
    resources: ["public/default/*"]
    actions: [lookup, produce, consume]
  - roles: [txn-user]
    resources: ["`+rig.TransactionCoordinatorTopic+`"]
    actions: [lookup]
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	framed := startProxy(t, brokerURLs(), txnAuthzYAML(t, policy))
	return []txnTarget{{"direct", theRig.BrokerURL(1), nil}, {"proxy", plain.PulsarURL, plain}, {"proxy-authz", framed.PulsarURL, framed}}
}

// txnAuthzYAML is the configuration of a proxy that inspects every client command: token
// authentication on only so that clients without one get the role txn-user, and the policy.
func txnAuthzYAML(t *testing.T, policy string) string {
	key := filepath.Join(t.TempDir(), "token.key")
	secret := make([]byte, 32)
	rand.Read(secret)
	if err := os.WriteFile(key, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf(`auth:
  enabled: true
  anonymousRole: txn-user
  token:
    secretKeyFile: %q
authz:
  enabled: true
  policyFile: %q
`, key, policy)
}

// needTransactions fails the test when the rig runs no transaction coordinator (an attached
// rig started without RIG_TRANSACTIONS=1), and logs which broker owns each coordinator.
func needTransactions(t *testing.T) {
	t.Helper()
	n := theRig.State("TRANSACTION_COORDINATORS")
	if n == "" || n == "0" {
		t.Fatalf("the rig runs no transaction coordinator (TRANSACTION_COORDINATORS=%q): start it with RIG_TRANSACTIONS=1", n)
	}
	owners, err := theRig.PartitionOwners(testCtx(t), rig.TransactionCoordinatorTopic)
	if err != nil {
		t.Fatalf("coordinator owners: %v", err)
	}
	var on []string
	for i, o := range owners {
		on = append(on, fmt.Sprintf("%d→broker %d", i, o.N))
	}
	t.Logf("transaction coordinators: %s", strings.Join(on, ", "))
}

// txnTopics makes the topics of one transaction test: out, partitioned, its partitions owned by
// both brokers (checked through the admin API), and in, one topic with nIn messages to consume.
func txnTopics(t *testing.T, prefix string, nIn int) (out string, outParts []string, in string) {
	t.Helper()
	out, owners := partitionedTopicOnBothBrokers(t, prefix+"-out", 2)
	for i := range owners {
		outParts = append(outParts, fmt.Sprintf("%s-partition-%d", out, i))
	}
	t.Logf("%s partitions owned by brokers %v", out, owners)
	in = uniqueTopic(t, prefix+"-in")
	t.Cleanup(func() { deleteTxnTopics(t, out, in) })
	// The subscriptions exist before the messages, so they are kept for them.
	readySubscription(t, "check", outParts...)
	readySubscription(t, "txn", in)
	c := newClient(t, theRig.BrokerURL(1))
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: in, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := range nIn {
		if _, err := p.Send(testCtx(t), &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "in-%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	return out, outParts, in
}

// deleteTxnTopics deletes a transaction test's topics once it ends. Acknowledging in a
// transaction gives a subscription a pending-acknowledgement log, which the broker replays
// whenever the topic is loaded again, as it is each time a later test moves its bundle; in
// Pulsar 4.0.8 that replay can spin forever and hold a replay thread, and every later
// subscription whose replay the thread would run then waits forever (apache/pulsar#26368,
// seen here as broker 1 never answering SUBSCRIBE for the rest of the run).
func deleteTxnTopics(t *testing.T, out, in string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := theRig.DeletePartitionedTopic(ctx, out, true); err != nil {
		t.Logf("deleting %s: %v", out, err)
	}
	if err := theRig.DeleteTopic(ctx, in, true); err != nil {
		t.Logf("deleting %s: %v", in, err)
	}
}

// readySubscription creates subscription sub on each topic, straight on its broker, before a
// client under test subscribes. A broker whose pending-acknowledgement replay thread is stuck
// (see deleteTxnTopics) never answers a SUBSCRIBE that lands on that thread: the cursor opens
// and "Created subscription" never follows, with or without the proxy. Unloading the topic
// and subscribing again lands on another thread (a subscription's is chosen by its hash). The
// transaction tests measure the proxy, not that bug of the broker's.
func readySubscription(t *testing.T, sub string, topics ...string) {
	t.Helper()
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: theRig.BrokerURL(1), OperationTimeout: 15 * time.Second,
		ConnectionTimeout: 10 * time.Second, Logger: plog.DefaultNopLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, topic := range topics {
		for attempt := 1; ; attempt++ {
			cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: sub})
			if err == nil {
				cons.Close()
				break
			}
			if attempt == 4 {
				t.Fatalf("subscription %s on %s: %v (attempt %d)", sub, topic, err, attempt)
			}
			t.Logf("subscription %s on %s not created (%v): unloading the topic and trying again", sub, topic, err)
			unloadTopic(t, topic)
		}
	}
}

// backlog is the number of messages of topic's subscription sub not acknowledged yet, as the
// owning broker counts them.
func backlog(t *testing.T, topic, sub string) int64 {
	t.Helper()
	st, err := theRig.TopicStats(testCtx(t), topic)
	if err != nil {
		t.Fatal(err)
	}
	s, ok := st.Subscriptions[sub]
	if !ok {
		t.Fatalf("%s has no subscription %s", topic, sub)
	}
	return s.MsgBacklog
}

// txnCounts is what one target measured: messages of each transaction delivered, and the
// input subscription's backlog after each.
type txnCounts struct {
	Committed, Aborted, TimedOut int   // messages delivered of each transaction
	BacklogCommit, BacklogAbort  int64 // input backlog after the commit and the abort
	BacklogTimeout               int64 // input backlog after the timeout's abort
	Produced, ProducedTimeout    int   // messages produced in the commit/abort and the timeout transactions
}

// Transactions with pulsar-client-go, straight to a broker and through the proxy, the same test
// body for both: a transaction that produces to partitions on both brokers and acknowledges a
// consumed message commits both at once; an aborted one's acknowledgement is undone; a
// transaction left open past its timeout is aborted by its coordinator (its acknowledgement
// never applied). pulsar-client-go 0.19 puts the transaction id in CommandSend only, not in the
// message metadata (apache/pulsar-client-go#1498), so the broker cannot tell an aborted
// transaction's messages from plain ones and delivers them once the transaction ends: that is
// measured both ways, and the proxy must measure exactly what the broker does.
func TestGatewayTransactionsGoClient(t *testing.T) {
	needTransactions(t)
	got := map[string]txnCounts{}
	for _, target := range txnTargets(t) {
		t.Run(target.name, func(t *testing.T) {
			got[target.name] = goTransactions(t, target.url)
			checkInspected(t, target, 2, 5, 3)
		})
	}
	compareTargets(t, got)
}

func goTransactions(t *testing.T, url string) (n txnCounts) {
	tx := newGoTxnRun(t, url)
	parts := len(tx.producers)
	n.Produced, n.ProducedTimeout = txnPerPartition*parts, txnPerPartition

	// Commit: the messages on both brokers and the acknowledgement become visible together.
	txn := tx.begin(2 * time.Minute)
	tx.produce(txn, "commit", parts)
	tx.ackIn(txn)
	if got := tx.receiveWithin(2 * time.Second); got != nil {
		t.Fatalf("message %q delivered before the transaction committed", got.Payload())
	}
	if b := backlog(t, tx.in, "txn"); b != 3 {
		t.Fatalf("backlog of %s before commit = %d; want 3 (the acknowledgement waits for the commit)", tx.in, b)
	}
	if err := txn.Commit(tx.ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
	n.Committed = tx.expectDelivered("commit", tx.drainToMarkers("after-commit"))
	n.BacklogCommit = backlog(t, tx.in, "txn")

	// Abort: the acknowledgement is undone (and the messages dropped, by a client that marks them).
	txn = tx.begin(2 * time.Minute)
	tx.produce(txn, "abort", parts)
	tx.ackIn(txn)
	if err := txn.Abort(tx.ctx); err != nil {
		t.Fatalf("abort: %v", err)
	}
	n.Aborted = tx.expectDelivered("abort", tx.drainToMarkers("after-abort"))
	n.BacklogAbort = backlog(t, tx.in, "txn")

	// Timeout: a transaction never ended is aborted by its coordinator once its timeout passes;
	// until then its open messages hold back the markers sent after them.
	txn = tx.begin(10 * time.Second)
	tx.produce(txn, "timeout", 1)
	tx.ackIn(txn)
	n.TimedOut = tx.expectDelivered("timeout", tx.drainToMarkers("after-timeout"))
	n.BacklogTimeout = backlog(t, tx.in, "txn")
	if err := txn.Commit(tx.ctx); err == nil {
		t.Fatal("a timed-out transaction committed")
	}
	checkGoCounts(t, n)
	return n
}

// checkGoCounts: the commit delivered everything and applied its acknowledgement; the abort's
// and the timeout's were undone; an aborted transaction's messages came all or not at all.
func checkGoCounts(t *testing.T, n txnCounts) {
	t.Helper()
	if n.Committed != n.Produced || n.BacklogCommit != 2 {
		t.Fatalf("commit: %d of %d messages delivered, input backlog %d (want all, and 2)", n.Committed, n.Produced, n.BacklogCommit)
	}
	if n.BacklogAbort != 2 || n.BacklogTimeout != 2 {
		t.Fatalf("input backlog after the abort %d, after the timeout %d; want 2 (acknowledgements undone)", n.BacklogAbort, n.BacklogTimeout)
	}
	if (n.Aborted != 0 && n.Aborted != n.Produced) || (n.TimedOut != 0 && n.TimedOut != n.ProducedTimeout) {
		t.Fatalf("aborted transactions partly delivered: %+v", n)
	}
	t.Logf("commit: %d of %d delivered; abort: %d of %d; timeout: %d of %d; input backlog 3 → %d → %d → %d",
		n.Committed, n.Produced, n.Aborted, n.Produced, n.TimedOut, n.ProducedTimeout, n.BacklogCommit, n.BacklogAbort, n.BacklogTimeout)
}

// newGoTxnRun makes the topics of one target's run (three input messages) and its client with
// transactions on, the consumers of in and out, and a producer per partition of out, all
// closed when the test ends.
func newGoTxnRun(t *testing.T, url string) *goTxnRun {
	out, parts, in := txnTopics(t, "gotxn", 3)
	c := newClientWith(t, pulsar.ClientOptions{URL: url, EnableTransaction: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	inCons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: in, SubscriptionName: "txn"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(inCons.Close)
	outCons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: out, SubscriptionName: "check",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(outCons.Close)
	producers := make([]pulsar.Producer, len(parts))
	for i, part := range parts {
		if producers[i], err = c.CreateProducer(pulsar.ProducerOptions{Topic: part, DisableBatching: true}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(producers[i].Close)
	}
	return &goTxnRun{t: t, ctx: ctx, c: c, in: in, inCons: inCons, outCons: outCons, producers: producers}
}

// goTxnRun holds one target's clients for the steps of goTransactions.
type goTxnRun struct {
	t         *testing.T
	ctx       context.Context
	c         pulsar.Client
	in        string
	inCons    pulsar.Consumer
	outCons   pulsar.Consumer
	producers []pulsar.Producer
}

// ackIn receives the next input message and acknowledges it in txn.
func (r *goTxnRun) ackIn(txn pulsar.Transaction) {
	r.t.Helper()
	m, err := r.inCons.Receive(r.ctx)
	if err != nil {
		r.t.Fatalf("receive from %s: %v", r.in, err)
	}
	if err := r.inCons.AckWithTxn(m, txn); err != nil {
		r.t.Fatalf("acknowledge %q in a transaction: %v", m.Payload(), err)
	}
}

func (r *goTxnRun) begin(timeout time.Duration) pulsar.Transaction {
	r.t.Helper()
	txn, err := r.c.NewTransaction(timeout)
	if err != nil {
		r.t.Fatalf("new transaction: %v", err)
	}
	return txn
}

// produce sends txnPerPartition messages "<label>-<partition>-<i>" in txn to each of the first
// n partitions.
func (r *goTxnRun) produce(txn pulsar.Transaction, label string, n int) {
	r.t.Helper()
	for p := range n {
		for i := range txnPerPartition {
			msg := &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "%s-%d-%d", label, p, i), Transaction: txn}
			if _, err := r.producers[p].Send(r.ctx, msg); err != nil {
				r.t.Fatalf("send %s %d to partition %d in a transaction: %v", label, i, p, err)
			}
		}
	}
}

// receiveWithin returns a message of out if one arrives within d, else nil.
func (r *goTxnRun) receiveWithin(d time.Duration) pulsar.Message {
	ctx, cancel := context.WithTimeout(r.ctx, d)
	defer cancel()
	m, err := r.outCons.Receive(ctx)
	if err != nil {
		return nil
	}
	return m
}

// drainToMarkers sends a marker without a transaction to every partition of out and returns
// the payloads received (and acknowledged) before all markers arrived. A transaction's
// messages stay ahead of anything sent after them, so this is every message of the
// transactions that ended before.
func (r *goTxnRun) drainToMarkers(label string) []string {
	r.t.Helper()
	want := map[string]bool{}
	for p, prod := range r.producers {
		m := fmt.Sprintf("marker-%s-%d", label, p)
		want[m] = true
		if _, err := prod.Send(r.ctx, &pulsar.ProducerMessage{Payload: []byte(m)}); err != nil {
			r.t.Fatalf("send %s: %v", m, err)
		}
	}
	var got []string
	for len(want) > 0 {
		m, err := r.outCons.Receive(r.ctx)
		if err != nil {
			r.t.Fatalf("waiting for %d markers (%s): %v; received before: %d", len(want), label, err, len(got))
		}
		r.outCons.Ack(m)
		if p := string(m.Payload()); want[p] {
			delete(want, p)
		} else {
			got = append(got, p)
		}
	}
	return got
}

// expectDelivered checks that the messages got are of the transaction label only, each once
// and in order within its partition, and returns how many there are.
func (r *goTxnRun) expectDelivered(label string, got []string) int {
	r.t.Helper()
	next := map[int]int{}
	for _, p := range got {
		var part, i int
		if _, err := fmt.Sscanf(p, label+"-%d-%d", &part, &i); err != nil {
			r.t.Fatalf("%s: unexpected message %q", label, p)
		}
		if i != next[part] {
			r.t.Fatalf("%s: partition %d delivered message %d; want %d (got %v)", label, part, i, next[part], got)
		}
		next[part]++
	}
	return len(got)
}

// The same with the Java client (TxnClient.java, compiled at test time against the rig's
// Pulsar jars), which marks its transactional messages: committed ones all arrive, aborted and
// timed-out ones never do, and only the committed transaction's acknowledgement is applied.
func TestGatewayTransactionsJavaClient(t *testing.T) {
	needTransactions(t)
	got := map[string]txnCounts{}
	for _, target := range txnTargets(t) {
		if target.name == "direct" && multiplexed() {
			// The broker's own run is the direct pass's; every count is checked below anyway.
			continue
		}
		t.Run(target.name, func(t *testing.T) {
			out, parts, in := txnTopics(t, "javatxn", 3)
			res := runJavaProbe(t, "TxnClient", target.url, out, fmt.Sprint(len(parts)), in, fmt.Sprint(txnPerPartition))
			var n txnCounts
			line := lineWithPrefix(res, "result ")
			if _, err := fmt.Sscanf(line, "result committed=%d aborted=%d timedout=%d produced=%d producedTimeout=%d",
				&n.Committed, &n.Aborted, &n.TimedOut, &n.Produced, &n.ProducedTimeout); err != nil {
				t.Fatalf("TxnClient did not report its counts (%v):\n%s", err, tailOf([]byte(res), 3000))
			}
			n.BacklogTimeout = backlog(t, in, "txn")
			if n.Committed != n.Produced || n.Aborted != 0 || n.TimedOut != 0 {
				t.Fatalf("delivered: committed %d of %d, aborted %d, timed out %d", n.Committed, n.Produced, n.Aborted, n.TimedOut)
			}
			// The aborted transactions' acknowledgements were undone: in-1 and in-2 are still there.
			if left := remainingInput(t, target.url, in); n.BacklogTimeout != 2 || !slices.Equal(left, []string{"in-1", "in-2"}) {
				t.Fatalf("input backlog %d, left %v; want 2: in-1 and in-2", n.BacklogTimeout, left)
			}
			t.Logf("commit: %d of %d delivered; abort: 0 of %d; timeout: 0 of %d; input left: in-1, in-2",
				n.Committed, n.Produced, n.Produced, n.ProducedTimeout)
			got[target.name] = n
			checkInspected(t, target, 2, 5, 3)
		})
	}
	compareTargets(t, got)
}

// checkInspected checks, on the proxy that inspects commands, that the transaction commands
// naming topics went through its topic checks and were allowed: at least one produce check per
// producer and per partition added to a transaction (ADD_PARTITION_TO_TXN), one consume check
// per subscription added (ADD_SUBSCRIPTION_TO_TXN); nothing denied, no command refused.
func checkInspected(t *testing.T, target txnTarget, producers, partitionsAdded, subscriptionsAdded int) {
	t.Helper()
	if target.name != "proxy-authz" {
		return
	}
	p := target.proxy
	produce := p.count(t, "pulsar_proxy_authorized_commands_total", `action="produce"`)
	consume := p.count(t, "pulsar_proxy_authorized_commands_total", `action="consume"`)
	denied := p.count(t, "pulsar_proxy_authorization_denials_total")
	refused := p.count(t, "pulsar_proxy_refused_commands_total")
	t.Logf("proxy-authz: %v produce and %v consume checks passed, %v denied, %v commands refused", produce, consume, denied, refused)
	if produce < float64(producers+partitionsAdded) || consume < float64(subscriptionsAdded) || denied != 0 || refused != 0 {
		t.Fatalf("the inspecting proxy saw %v produce and %v consume checks (want at least %d and %d), %v denials, %v refusals",
			produce, consume, producers+partitionsAdded, subscriptionsAdded, denied, refused)
	}
}

// compareTargets fails unless every proxy target measured what the broker itself did (or, when
// the broker's run was left out, what the plain proxy did).
func compareTargets(t *testing.T, got map[string]txnCounts) {
	t.Helper()
	ref := "direct"
	if _, ok := got[ref]; !ok {
		ref = "proxy"
	}
	want := got[ref]
	t.Logf("%s: %+v", ref, want)
	for _, name := range []string{"proxy", "proxy-authz"} {
		if want.Produced == 0 || got[name] != want {
			t.Fatalf("through %s %+v; %s %+v", name, got[name], ref, want)
		}
	}
}

// remainingInput reads what is left on subscription "txn" of topic (the input backlog).
func remainingInput(t *testing.T, url, topic string) []string {
	t.Helper()
	cons, err := newClient(t, url).Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "txn"})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	var left []string
	for range backlog(t, topic, "txn") {
		m, err := cons.Receive(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		left = append(left, string(m.Payload()))
	}
	return left
}

// lineWithPrefix is the first line of out that starts with prefix, or "".
func lineWithPrefix(out, prefix string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

// A proxy whose policy does not let a role look up the coordinators' topic refuses that role
// transactions: the client cannot find a coordinator (it is never sent to one).
func TestGatewayTransactionsNeedCoordinatorLookup(t *testing.T) {
	needTransactions(t)
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	err := os.WriteFile(policy, []byte(`rules:
  - roles: [txn-user]
    resources: ["public/default/*"]
    actions: [lookup, produce, consume]
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, brokerURLs(), txnAuthzYAML(t, policy))
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: p.PulsarURL, EnableTransaction: true,
		OperationTimeout: 10 * time.Second, Logger: plog.DefaultNopLogger()})
	if err == nil {
		c.Close()
		t.Fatal("a client without lookup on the coordinators' topic started transactions")
	}
	if n := p.count(t, "pulsar_proxy_authorization_denials_total", `action="lookup"`); n < 1 {
		t.Fatalf("the client failed (%v) but the proxy denied no lookup", err)
	}
	t.Logf("refused as expected: %v", err)
}
