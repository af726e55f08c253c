package e2eauth

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/pulsar-proxy/pulsar-proxy/test/rig"
)

// txnPolicy lets every role use acme's namespaces and find transaction coordinators.
const txnPolicy = `
rules:
  - roles: ["*"]
    resources: ["acme/*/*"]
    actions: [lookup, produce, consume]
  - roles: ["*"]
    resources: ["` + rig.TransactionCoordinatorTopic + `"]
    actions: [lookup]
`

// Transactions on brokers with authentication and authorization on, straight to broker 1 and
// through the proxy (token at the proxy, original_principal and the client's token to the
// brokers): alice, whom the brokers let look up the coordinators' topic, commits a transaction
// of 10 messages, none delivered before the commit; bob, whom they do not, gets no
// transactions either way — the brokers ask the client's own role, whatever the proxy allows.
func TestTransactionsWithBrokerAuthorization(t *testing.T) {
	if n := theRig.State("TRANSACTION_COORDINATORS"); n == "" || n == "0" {
		t.Fatalf("the auth rig runs no transaction coordinator (TRANSACTION_COORDINATORS=%q)", n)
	}
	p := startProxy(t, txnPolicy, "")
	for _, target := range []struct{ name, url string }{{"direct", theRig.BrokerURL(1)}, {"proxy", p.PulsarURL}} {
		t.Run(target.name, func(t *testing.T) {
			alice := clientWith(t, pulsar.ClientOptions{URL: target.url, EnableTransaction: true,
				Authentication: pulsar.NewAuthenticationToken(mustToken("alice", 0))}, time.Minute)
			if n := commitTen(t, alice, uniqueTopic(nsShared, "txn-"+target.name)); n != 10 {
				t.Fatalf("delivered %d of the 10 committed messages", n)
			}
			_, err := pulsar.NewClient(pulsar.ClientOptions{URL: target.url, EnableTransaction: true,
				OperationTimeout: 10 * time.Second, Authentication: pulsar.NewAuthenticationToken(mustToken("bob", 0))})
			if err == nil {
				t.Fatal("bob, not allowed to look up the coordinators' topic, got transactions")
			}
			t.Logf("alice: 10 of 10 committed messages delivered; bob refused: %v", err)
		})
	}
	// Bob's refusal was the brokers': the proxy's policy lets him look the coordinators up.
	denied, refused := p.count(t, "pulsar_proxy_authorization_denials_total"), p.count(t, "pulsar_proxy_refused_commands_total")
	if denied != 0 || refused != 0 {
		t.Fatalf("the proxy denied %v commands and refused %v", denied, refused)
	}
}

// commitTen produces 10 messages to topic in a transaction, checks that none is delivered
// before the commit, commits, and returns how many arrive before a marker sent afterwards.
func commitTen(t *testing.T, c pulsar.Client, topic string) int {
	t.Helper()
	ctx := ctxT(t, 3*time.Minute)
	cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	defer cons.Close()
	prod, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatalf("producer: %v", err)
	}
	defer prod.Close()
	txn, err := c.NewTransaction(time.Minute)
	if err != nil {
		t.Fatalf("new transaction: %v", err)
	}
	for i := range 10 {
		if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "txn-%d", i), Transaction: txn}); err != nil {
			t.Fatalf("send %d in a transaction: %v", i, err)
		}
	}
	early, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if m, err := cons.Receive(early); err == nil {
		t.Fatalf("%q delivered before the commit", m.Payload())
	}
	if err := txn.Commit(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
	if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("marker")}); err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("receive after %d: %v", n, err)
		}
		cons.Ack(m)
		if string(m.Payload()) == "marker" {
			return n
		}
		if want := fmt.Sprintf("txn-%d", n); string(m.Payload()) != want {
			t.Fatalf("got %q; want %q", m.Payload(), want)
		}
		n++
	}
}
