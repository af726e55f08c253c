// TxnClient: the Java client side of the transaction test (test/e2e/transactions_test.go).
// Arguments: service URL, OUT (a partitioned topic), its partition count, IN (a topic whose
// subscription "txn" holds three messages), and K. With transactions on it runs three
// transactions, each producing K messages "<label>-<partition>-<i>" to partitions of OUT and
// acknowledging the next message of IN:
//   commit   to every partition; nothing of it may be delivered before the commit;
//   abort    to every partition;
//   timeout  to partition 0, with a 10 s timeout and never ended: its coordinator aborts it.
// After each it sends a marker without a transaction to every partition and receives until the
// markers arrive: a transaction's messages stay ahead of what is sent after them, so what comes
// before the markers is all that was delivered of it. It prints
//   result committed=N aborted=N timedout=N produced=N producedTimeout=N
// and exits 0, or says what went wrong and exits 1. Before each step it prints "step <what>"
// with the seconds since it started, so a failure shows where it waited.

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.transaction.Transaction;

public class TxnClient {
    static Consumer<byte[]> in, out;
    static final List<Producer<byte[]>> producers = new ArrayList<>();
    static int k;

    static final long started = System.nanoTime();

    static void step(String what) {
        System.out.printf("step %.1fs %s%n", (System.nanoTime() - started) / 1e9, what);
        System.out.flush();
    }

    static void fail(String why) {
        System.out.println("FAIL " + why);
        System.exit(1);
    }

    static Transaction begin(PulsarClient client, long timeout, TimeUnit unit) throws Exception {
        return client.newTransaction().withTransactionTimeout(timeout, unit).build().get(60, TimeUnit.SECONDS);
    }

    // produce sends K messages of label in txn to each of the first n partitions, then
    // acknowledges the next input message in txn.
    static void produceAndAck(Transaction txn, String label, int n) throws Exception {
        for (int p = 0; p < n; p++) {
            for (int i = 0; i < k; i++) {
                producers.get(p).newMessage(txn).value((label + "-" + p + "-" + i).getBytes(StandardCharsets.UTF_8)).send();
            }
        }
        Message<byte[]> m = in.receive(60, TimeUnit.SECONDS);
        if (m == null) {
            fail("no input message for " + label);
        }
        in.acknowledgeAsync(m.getMessageId(), txn).get(60, TimeUnit.SECONDS);
    }

    // drain sends the markers and returns how many messages of label came before them,
    // checking that nothing else did and that each partition's came in order.
    static int drain(String label) throws Exception {
        step("drain " + label);
        Set<String> want = new HashSet<>();
        for (int p = 0; p < producers.size(); p++) {
            String marker = "marker-" + label + "-" + p;
            want.add(marker);
            producers.get(p).newMessage().value(marker.getBytes(StandardCharsets.UTF_8)).send();
        }
        int[] next = new int[producers.size()];
        int got = 0;
        while (!want.isEmpty()) {
            Message<byte[]> m = out.receive(120, TimeUnit.SECONDS);
            if (m == null) {
                fail("timed out waiting for the markers after " + label + " (" + got + " messages before)");
            }
            out.acknowledge(m);
            String v = new String(m.getValue(), StandardCharsets.UTF_8);
            if (want.remove(v)) {
                continue;
            }
            String[] f = v.split("-");
            if (f.length != 3 || !f[0].equals(label)) {
                fail(label + ": unexpected message " + v);
            }
            int p = Integer.parseInt(f[1]), i = Integer.parseInt(f[2]);
            if (i != next[p]) {
                fail(label + ": partition " + p + " delivered " + i + ", want " + next[p]);
            }
            next[p]++;
            got++;
        }
        return got;
    }

    public static void main(String[] args) throws Exception {
        String url = args[0], outTopic = args[1], inTopic = args[3];
        int partitions = Integer.parseInt(args[2]);
        k = Integer.parseInt(args[4]);
        try (PulsarClient client = PulsarClient.builder().serviceUrl(url).enableTransaction(true)
                .operationTimeout(60, TimeUnit.SECONDS).build()) {
            step("subscribe and create producers");
            in = client.newConsumer().topic(inTopic).subscriptionName("txn").subscribe();
            out = client.newConsumer().topic(outTopic).subscriptionName("check")
                    .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
            for (int p = 0; p < partitions; p++) {
                // A transactional producer needs the send timeout off.
                producers.add(client.newProducer().topic(outTopic + "-partition-" + p).enableBatching(false)
                        .sendTimeout(0, TimeUnit.SECONDS).create());
            }

            step("begin commit");
            Transaction txn = begin(client, 2, TimeUnit.MINUTES);
            step("produce and acknowledge commit");
            produceAndAck(txn, "commit", partitions);
            Message<byte[]> early = out.receive(2, TimeUnit.SECONDS);
            if (early != null) {
                fail("delivered before the commit: " + new String(early.getValue(), StandardCharsets.UTF_8));
            }
            step("commit");
            txn.commit().get(60, TimeUnit.SECONDS);
            int committed = drain("commit");

            step("begin abort");
            txn = begin(client, 2, TimeUnit.MINUTES);
            step("produce and acknowledge abort");
            produceAndAck(txn, "abort", partitions);
            step("abort");
            txn.abort().get(60, TimeUnit.SECONDS);
            int aborted = drain("abort");

            step("begin timeout");
            txn = begin(client, 10, TimeUnit.SECONDS);
            step("produce and acknowledge timeout");
            produceAndAck(txn, "timeout", 1);
            int timedOut = drain("timeout");
            try {
                txn.commit().get(60, TimeUnit.SECONDS);
                fail("a timed-out transaction committed");
            } catch (Exception expected) {
                // the coordinator aborted it
            }
            System.out.println("result committed=" + committed + " aborted=" + aborted + " timedout=" + timedOut
                    + " produced=" + k * partitions + " producedTimeout=" + k);
            for (Producer<byte[]> p : producers) {
                p.close();
            }
            in.close();
            out.close();
        }
    }
}
