// MatrixClient: the Java column of the client feature matrix (test/e2e/clientmatrix_test.go).
// One JVM runs every feature it is given (JVM start is slow), each on its own topics, and prints
// one line per feature: "MATRIX <feature> pass|fail|unsupported <detail>". Arguments are
// key=value: url, tlsUrl, caFile, mtlsUrl, certFile, keyFile, authUrl, tokenFile, prefix (topic
// name prefix), partitioned, terminated (topics the harness prepared), features (comma list).

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.regex.Pattern;
import org.apache.pulsar.client.api.AuthenticationFactory;
import org.apache.pulsar.client.api.CompressionType;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.ConsumerBuilder;
import org.apache.pulsar.client.api.DeadLetterPolicy;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.MessageIdAdv;
import org.apache.pulsar.client.api.MessageRoutingMode;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.ProducerAccessMode;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.client.api.Reader;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;
import org.apache.pulsar.client.api.transaction.Transaction;

public class MatrixClient {
    static final Map<String, String> cfg = new HashMap<>();
    static PulsarClient client;

    /** A feature failed: the message says what was wrong. */
    static class Failed extends Exception {
        Failed(String msg) { super(msg); }
    }

    /** A record for the schema features (public fields and constructor: Avro reflection). */
    public static class Rec {
        public String name;
        public int n;
        public Rec() {}
        Rec(String name, int n) { this.name = name; this.n = n; }
    }

    interface Feature { void run() throws Exception; }

    static final Map<String, Feature> features = new HashMap<>();

    static {
        features.put("produce-consume", () -> roundtrip(topic("pc"), 20));
        features.put("partitioned", MatrixClient::partitioned);
        features.put("sub-exclusive", MatrixClient::subExclusive);
        features.put("sub-shared", MatrixClient::subShared);
        features.put("sub-failover", MatrixClient::subFailover);
        features.put("sub-key-shared", MatrixClient::subKeyShared);
        features.put("batching-on", () -> batching(true));
        features.put("batching-off", () -> batching(false));
        features.put("compression-lz4", () -> compression(CompressionType.LZ4));
        features.put("compression-zlib", () -> compression(CompressionType.ZLIB));
        features.put("compression-zstd", () -> compression(CompressionType.ZSTD));
        features.put("compression-snappy", () -> compression(CompressionType.SNAPPY));
        features.put("schema-json", () -> schema(Schema.JSON(Rec.class), "json"));
        features.put("schema-avro", () -> schema(Schema.AVRO(Rec.class), "avro"));
        features.put("regex-polling", () -> regex("rp", 1, TimeUnit.SECONDS));
        features.put("regex-watcher", () -> regex("rw", 1, TimeUnit.HOURS));
        features.put("reader", MatrixClient::reader);
        features.put("seek-id", MatrixClient::seekId);
        features.put("seek-time", MatrixClient::seekTime);
        features.put("nack-redelivery", MatrixClient::nack);
        features.put("dead-letter", MatrixClient::deadLetter);
        features.put("retry-topic", MatrixClient::retryTopic);
        features.put("delayed-delivery", MatrixClient::delayed);
        features.put("non-persistent", MatrixClient::nonPersistent);
        features.put("exclusive-producer", MatrixClient::exclusiveProducer);
        features.put("termination", MatrixClient::termination);
        features.put("transactions", MatrixClient::transactions);
        features.put("chunking", MatrixClient::chunking);
        features.put("token-refresh", MatrixClient::tokenRefresh);
        features.put("tls", MatrixClient::tls);
        features.put("mtls", MatrixClient::mtls);
    }

    public static void main(String[] args) throws Exception {
        for (String a : args) {
            int eq = a.indexOf('=');
            cfg.put(a.substring(0, eq), a.substring(eq + 1));
        }
        System.out.println("MATRIX-CLIENT " + org.apache.pulsar.PulsarVersion.getVersion());
        client = PulsarClient.builder().serviceUrl(cfg.get("url")).operationTimeout(30, TimeUnit.SECONDS).build();
        ExecutorService pool = Executors.newCachedThreadPool(r -> {
            Thread t = new Thread(r);
            t.setDaemon(true); // a feature stuck past its time must not keep the JVM alive
            return t;
        });
        for (String name : cfg.get("features").split(",")) {
            Feature f = features.get(name);
            if (f == null) {
                report(name, "unsupported", "no such feature in MatrixClient");
                continue;
            }
            Future<?> done = pool.submit((Callable<Void>) () -> { f.run(); return null; });
            try {
                done.get(90, TimeUnit.SECONDS);
                report(name, "pass", "");
            } catch (TimeoutException e) {
                done.cancel(true);
                report(name, "fail", "did not finish within 90 s");
            } catch (java.util.concurrent.ExecutionException e) {
                Throwable c = e.getCause();
                report(name, "fail", c instanceof Failed ? c.getMessage() : c.toString());
            }
        }
        client.closeAsync();
        System.exit(0);
    }

    static void report(String name, String result, String detail) {
        System.out.println("MATRIX " + name + " " + result + " " + detail.replace('\n', ' '));
        System.out.flush();
    }

    static String topic(String name) { return cfg.get("prefix") + "-" + name; }

    static byte[] payload(int i) { return ("m-" + i).getBytes(StandardCharsets.UTF_8); }

    static String text(Message<byte[]> m) { return new String(m.getValue(), StandardCharsets.UTF_8); }

    static void check(boolean ok, String what) throws Failed {
        if (!ok) {
            throw new Failed(what);
        }
    }

    static Message<byte[]> receive(Consumer<byte[]> c, String what) throws Exception {
        Message<byte[]> m = c.receive(30, TimeUnit.SECONDS);
        check(m != null, "no message within 30 s: " + what);
        return m;
    }

    static ConsumerBuilder<byte[]> consumer(String topic, String sub, SubscriptionType type) {
        return client.newConsumer().topic(topic).subscriptionName(sub).subscriptionType(type)
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest);
    }

    /** Receives m-0 .. m-(n-1) in order from c, acknowledging each. */
    static void expectInOrder(Consumer<byte[]> c, int from, int n) throws Exception {
        for (int i = from; i < n; i++) {
            Message<byte[]> m = receive(c, "message " + i);
            check(text(m).equals("m-" + i), "got " + text(m) + ", want m-" + i);
            c.acknowledge(m);
        }
    }

    static void roundtrip(String topic, int n) throws Exception {
        roundtripWith(client, topic, n);
    }

    static void roundtripWith(PulsarClient pc, String topic, int n) throws Exception {
        try (Consumer<byte[]> c = pc.newConsumer().topic(topic).subscriptionName("s").subscribe();
             Producer<byte[]> p = pc.newProducer().topic(topic).create()) {
            for (int i = 0; i < n; i++) {
                p.send(payload(i));
            }
            expectInOrder(c, 0, n);
        }
    }

    static void partitioned() throws Exception {
        String topic = cfg.get("partitioned");
        try (Consumer<byte[]> c = consumer(topic, "s", SubscriptionType.Shared).subscribe();
             Producer<byte[]> p = client.newProducer().topic(topic)
                     .messageRoutingMode(MessageRoutingMode.RoundRobinPartition).enableBatching(false).create()) {
            for (int i = 0; i < 20; i++) {
                p.send(payload(i));
            }
            Set<String> got = new HashSet<>(), partitions = new HashSet<>();
            while (got.size() < 20) {
                Message<byte[]> m = receive(c, "partitioned, after " + got.size());
                got.add(text(m));
                partitions.add(m.getTopicName());
                c.acknowledge(m);
            }
            check(partitions.size() == 2, "messages from partitions " + partitions + ", want both");
        }
    }

    static void subExclusive() throws Exception {
        String topic = topic("excl");
        try (Consumer<byte[]> c = consumer(topic, "s", SubscriptionType.Exclusive).subscribe()) {
            try {
                consumer(topic, "s", SubscriptionType.Exclusive).subscribe().close();
                throw new Failed("a second consumer joined an Exclusive subscription");
            } catch (PulsarClientException.ConsumerBusyException expected) {
                // the broker refuses it, as it should
            }
            try (Producer<byte[]> p = client.newProducer().topic(topic).create()) {
                for (int i = 0; i < 10; i++) {
                    p.send(payload(i));
                }
                expectInOrder(c, 0, 10);
            }
        }
    }

    /** Collects n distinct payloads from the consumers and returns which consumer got each. */
    static Map<String, Integer> collect(List<Consumer<byte[]>> cs, int n) throws Exception {
        Map<String, Integer> by = new HashMap<>();
        long deadline = System.currentTimeMillis() + 30_000;
        while (by.size() < n) {
            check(System.currentTimeMillis() < deadline, "received " + by.size() + " of " + n + " in 30 s");
            for (int k = 0; k < cs.size(); k++) {
                Message<byte[]> m = cs.get(k).receive(100, TimeUnit.MILLISECONDS);
                if (m != null) {
                    by.put(text(m) + "|" + m.getKey(), k);
                    cs.get(k).acknowledge(m);
                }
            }
        }
        return by;
    }

    static List<Consumer<byte[]>> two(String topic, SubscriptionType type) throws Exception {
        List<Consumer<byte[]>> cs = new ArrayList<>();
        cs.add(consumer(topic, "s", type).consumerName("a").subscribe());
        cs.add(consumer(topic, "s", type).consumerName("b").subscribe());
        return cs;
    }

    static void closeAll(List<Consumer<byte[]>> cs) throws Exception {
        for (Consumer<byte[]> c : cs) {
            c.close();
        }
    }

    static void sendKeyed(String topic, int n, int keys) throws Exception {
        try (Producer<byte[]> p = client.newProducer().topic(topic).enableBatching(false).create()) {
            for (int i = 0; i < n; i++) {
                p.newMessage().key("k" + (i % keys)).value(payload(i)).send();
            }
        }
    }

    static void subShared() throws Exception {
        String topic = topic("shared");
        List<Consumer<byte[]>> cs = two(topic, SubscriptionType.Shared);
        // Small receiver queues would make the spread certain; the default ones spread it too,
        // since the broker dispatches round robin over consumers with permits.
        sendKeyed(topic, 40, 40);
        Map<String, Integer> by = collect(cs, 40);
        closeAll(cs);
        check(by.containsValue(0) && by.containsValue(1), "one consumer got all 40 messages");
    }

    static void subFailover() throws Exception {
        String topic = topic("failover");
        List<Consumer<byte[]>> cs = two(topic, SubscriptionType.Failover);
        sendKeyed(topic, 20, 20);
        Map<String, Integer> by = collect(cs, 20);
        closeAll(cs);
        check(!(by.containsValue(0) && by.containsValue(1)), "both consumers of a Failover subscription got messages");
    }

    static void subKeyShared() throws Exception {
        String topic = topic("keyshared");
        List<Consumer<byte[]>> cs = two(topic, SubscriptionType.Key_Shared);
        sendKeyed(topic, 40, 8);
        Map<String, Integer> by = collect(cs, 40);
        closeAll(cs);
        Map<String, Integer> keyOwner = new HashMap<>();
        for (Map.Entry<String, Integer> e : by.entrySet()) {
            String key = e.getKey().split("\\|")[1];
            Integer prev = keyOwner.putIfAbsent(key, e.getValue());
            check(prev == null || prev.equals(e.getValue()), "key " + key + " went to both consumers");
        }
    }

    static void batching(boolean on) throws Exception {
        String topic = topic(on ? "batch-on" : "batch-off");
        try (Consumer<byte[]> c = consumer(topic, "s", SubscriptionType.Exclusive).subscribe();
             Producer<byte[]> p = client.newProducer().topic(topic).enableBatching(on)
                     .batchingMaxPublishDelay(200, TimeUnit.MILLISECONDS).create()) {
            for (int i = 0; i < 50; i++) {
                p.sendAsync(payload(i));
            }
            p.flush();
            int batched = 0;
            for (int i = 0; i < 50; i++) {
                Message<byte[]> m = receive(c, "message " + i);
                check(text(m).equals("m-" + i), "got " + text(m) + ", want m-" + i);
                if (((MessageIdAdv) m.getMessageId()).getBatchIndex() >= 0) {
                    batched++;
                }
                c.acknowledge(m);
            }
            check(on ? batched > 0 : batched == 0, batched + " of 50 messages arrived in batches");
        }
    }

    static void compression(CompressionType type) throws Exception {
        String topic = topic("compress-" + type.name().toLowerCase());
        String filler = "compressible ".repeat(100);
        try (Consumer<byte[]> c = consumer(topic, "s", SubscriptionType.Exclusive).subscribe();
             Producer<byte[]> p = client.newProducer().topic(topic).compressionType(type).create()) {
            for (int i = 0; i < 20; i++) {
                p.sendAsync(("m-" + i + filler).getBytes(StandardCharsets.UTF_8));
            }
            p.flush();
            for (int i = 0; i < 20; i++) {
                Message<byte[]> m = receive(c, "message " + i);
                check(text(m).equals("m-" + i + filler), "message " + i + " arrived altered");
            }
        }
    }

    /** A consumer of the schema subscribes (the broker records the schema); a producer without
     * a schema then sends a typed message, for which the client asks for the schema's version
     * with GET_OR_CREATE_SCHEMA; the consumer decodes it. */
    static void schema(Schema<Rec> schema, String name) throws Exception {
        String topic = topic("schema-" + name);
        try (Consumer<Rec> c = client.newConsumer(schema).topic(topic).subscriptionName("s")
                     .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
             Producer<byte[]> p = client.newProducer().topic(topic).create()) {
            p.newMessage(schema).value(new Rec("alice", 7)).send();
            Message<Rec> m = c.receive(30, TimeUnit.SECONDS);
            check(m != null, "no message within 30 s");
            check("alice".equals(m.getValue().name) && m.getValue().n == 7, "decoded " + m.getValue().name + "/" + m.getValue().n);
            check(m.getSchemaVersion() != null, "the message carries no schema version");
        }
    }

    /** A pattern consumer learns of a topic created after it subscribed: by polling each second
     * (regex-polling), or with an hour's polling interval only through a topic-list watcher. */
    static void regex(String tag, int period, TimeUnit unit) throws Exception {
        String base = topic(tag);
        try (Consumer<byte[]> c = client.newConsumer().topicsPattern(Pattern.compile(base + "-.*"))
                .subscriptionName("s").subscriptionInitialPosition(SubscriptionInitialPosition.Earliest)
                .patternAutoDiscoveryPeriod(period, unit).subscribe();
             Producer<byte[]> p = client.newProducer().topic(base + "-late").create()) {
            p.send(payload(1));
            Message<byte[]> m = c.receive(60, TimeUnit.SECONDS);
            check(m != null, "the topic created after subscribing was not consumed within 60 s");
            check(text(m).equals("m-1"), "got " + text(m));
        }
    }

    static List<MessageId> produceN(String topic, int n) throws Exception {
        List<MessageId> ids = new ArrayList<>();
        try (Producer<byte[]> p = client.newProducer().topic(topic).enableBatching(false).create()) {
            for (int i = 0; i < n; i++) {
                ids.add(p.send(payload(i)));
            }
        }
        return ids;
    }

    static void reader() throws Exception {
        String topic = topic("reader");
        List<MessageId> ids = produceN(topic, 10);
        try (Reader<byte[]> r = client.newReader().topic(topic).startMessageId(MessageId.earliest).create()) {
            for (int i = 0; i < 10; i++) {
                Message<byte[]> m = r.readNext(30, TimeUnit.SECONDS);
                check(m != null && text(m).equals("m-" + i), "reader from earliest: message " + i);
            }
        }
        try (Reader<byte[]> r = client.newReader().topic(topic).startMessageId(ids.get(4)).create()) {
            Message<byte[]> m = r.readNext(30, TimeUnit.SECONDS);
            check(m != null && text(m).equals("m-5"), "reader after message 4 did not start at m-5");
        }
    }

    static void seekId() throws Exception {
        String topic = topic("seekid");
        try (Consumer<byte[]> c = consumer(topic, "s", SubscriptionType.Exclusive).subscribe()) {
            List<MessageId> ids = produceN(topic, 10);
            expectInOrder(c, 0, 10);
            // Delivery resumes after the given message, as every client does it directly too.
            c.seek(ids.get(3));
            expectInOrder(c, 4, 10);
        }
    }

    static void seekTime() throws Exception {
        String topic = topic("seektime");
        try (Consumer<byte[]> c = consumer(topic, "s", SubscriptionType.Exclusive).subscribe();
             Producer<byte[]> p = client.newProducer().topic(topic).enableBatching(false).create()) {
            for (int i = 0; i < 5; i++) {
                p.send(payload(i));
            }
            Thread.sleep(50); // publish times on either side of the seek time
            long at = System.currentTimeMillis();
            Thread.sleep(50);
            for (int i = 5; i < 10; i++) {
                p.send(payload(i));
            }
            expectInOrder(c, 0, 10);
            c.seek(at);
            expectInOrder(c, 5, 10);
        }
    }

    static void nack() throws Exception {
        String topic = topic("nack");
        try (Consumer<byte[]> c = consumer(topic, "s", SubscriptionType.Shared)
                .negativeAckRedeliveryDelay(500, TimeUnit.MILLISECONDS).subscribe()) {
            produceN(topic, 1);
            Message<byte[]> m = receive(c, "first delivery");
            c.negativeAcknowledge(m);
            Message<byte[]> again = receive(c, "redelivery after the negative ack");
            check(text(again).equals("m-0") && again.getRedeliveryCount() == 1,
                    "redelivered " + text(again) + " with count " + again.getRedeliveryCount());
            c.acknowledge(again);
        }
    }

    static void deadLetter() throws Exception {
        String topic = topic("dlq");
        try (Consumer<byte[]> dlq = consumer(topic + "-dead", "s", SubscriptionType.Exclusive).subscribe();
             Consumer<byte[]> c = consumer(topic, "s", SubscriptionType.Shared)
                     .negativeAckRedeliveryDelay(300, TimeUnit.MILLISECONDS)
                     .deadLetterPolicy(DeadLetterPolicy.builder().maxRedeliverCount(1)
                             .deadLetterTopic(topic + "-dead").build()).subscribe()) {
            produceN(topic, 1);
            // Negative acks until the message is moved: how many deliveries that takes is
            // the client's reading of maxRedeliverCount.
            long deadline = System.currentTimeMillis() + 30_000;
            int deliveries = 0;
            while (System.currentTimeMillis() < deadline) {
                Message<byte[]> m = c.receive(200, TimeUnit.MILLISECONDS);
                if (m != null) {
                    deliveries++;
                    c.negativeAcknowledge(m);
                }
                Message<byte[]> dead = dlq.receive(200, TimeUnit.MILLISECONDS);
                if (dead != null) {
                    check(text(dead).equals("m-0") && deliveries > 0, "dead letter " + text(dead) + " after " + deliveries + " deliveries");
                    return;
                }
            }
            throw new Failed("nothing on the dead-letter topic within 30 s (" + deliveries + " deliveries)");
        }
    }

    static void retryTopic() throws Exception {
        String topic = topic("retry");
        try (Consumer<byte[]> c = consumer(topic, "s", SubscriptionType.Shared).enableRetry(true)
                .deadLetterPolicy(DeadLetterPolicy.builder().maxRedeliverCount(3)
                        .retryLetterTopic(topic + "-retry").deadLetterTopic(topic + "-dead").build()).subscribe()) {
            produceN(topic, 1);
            c.reconsumeLater(receive(c, "first delivery"), 500, TimeUnit.MILLISECONDS);
            Message<byte[]> m = receive(c, "the retried message");
            check(text(m).equals("m-0") && "1".equals(m.getProperty("RECONSUMETIMES")),
                    "retried " + text(m) + " with RECONSUMETIMES " + m.getProperty("RECONSUMETIMES"));
            check(m.getTopicName().endsWith("-retry"), "retried message came from " + m.getTopicName());
            c.acknowledge(m);
        }
    }

    /** A message delayed by 3 s is sent before an undelayed one, and must arrive after it. */
    static void delayed() throws Exception {
        String topic = topic("delayed");
        try (Consumer<byte[]> c = consumer(topic, "s", SubscriptionType.Shared).subscribe();
             Producer<byte[]> p = client.newProducer().topic(topic).enableBatching(false).create()) {
            p.newMessage().value(payload(0)).deliverAfter(3, TimeUnit.SECONDS).send();
            p.send(payload(1));
            Message<byte[]> first = receive(c, "first"), second = receive(c, "second");
            check(text(first).equals("m-1") && text(second).equals("m-0"),
                    "order " + text(first) + ", " + text(second) + "; want the delayed m-0 last");
            c.acknowledge(first);
            c.acknowledge(second);
        }
    }

    static void nonPersistent() throws Exception {
        roundtrip(topic("np").replace("persistent://", "non-persistent://"), 20);
    }

    static void exclusiveProducer() throws Exception {
        String topic = topic("exclprod");
        Producer<byte[]> a = client.newProducer().topic(topic).accessMode(ProducerAccessMode.Exclusive).create();
        try {
            client.newProducer().topic(topic).accessMode(ProducerAccessMode.Exclusive).create().close();
            throw new Failed("a second Exclusive producer was created");
        } catch (PulsarClientException.ProducerFencedException | PulsarClientException.ProducerBusyException expected) {
            // fenced out while the first one lives
        }
        a.close();
        try (Producer<byte[]> b = client.newProducer().topic(topic).accessMode(ProducerAccessMode.Exclusive).create()) {
            b.send(payload(0));
        }
    }

    /** The harness produced 3 messages and terminated the topic: read them, then the broker
     * says ReachedEndOfTopic; a producer is refused. */
    static void termination() throws Exception {
        String topic = cfg.get("terminated");
        try (Consumer<byte[]> c = consumer(topic, "s", SubscriptionType.Exclusive).subscribe()) {
            expectInOrder(c, 0, 3);
            long deadline = System.currentTimeMillis() + 30_000;
            while (!c.hasReachedEndOfTopic()) {
                check(System.currentTimeMillis() < deadline, "no ReachedEndOfTopic within 30 s");
                Thread.sleep(100);
            }
        }
        try {
            client.newProducer().topic(topic).create().close();
            throw new Failed("a producer was created on a terminated topic");
        } catch (PulsarClientException.TopicTerminatedException expected) {
            // as it should
        }
    }

    static void transactions() throws Exception {
        String topic = topic("txn");
        try (PulsarClient tc = PulsarClient.builder().serviceUrl(cfg.get("url")).enableTransaction(true)
                .operationTimeout(30, TimeUnit.SECONDS).build();
             Consumer<byte[]> c = tc.newConsumer().topic(topic).subscriptionName("s")
                     .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
             Producer<byte[]> p = tc.newProducer().topic(topic).sendTimeout(0, TimeUnit.SECONDS).create()) {
            Transaction aborted = tc.newTransaction().withTransactionTimeout(1, TimeUnit.MINUTES).build().get(30, TimeUnit.SECONDS);
            p.newMessage(aborted).value(payload(0)).send();
            aborted.abort().get(30, TimeUnit.SECONDS);
            Transaction txn = tc.newTransaction().withTransactionTimeout(1, TimeUnit.MINUTES).build().get(30, TimeUnit.SECONDS);
            p.newMessage(txn).value(payload(1)).send();
            check(c.receive(1, TimeUnit.SECONDS) == null, "a message of an open or aborted transaction was delivered");
            txn.commit().get(30, TimeUnit.SECONDS);
            Message<byte[]> m = receive(c, "the committed message");
            check(text(m).equals("m-1"), "got " + text(m) + ", want the committed m-1 (m-0 was aborted)");
        }
    }

    static void chunking() throws Exception {
        String topic = topic("chunks");
        byte[] big = new byte[1 << 20];
        for (int i = 0; i < big.length; i++) {
            big[i] = (byte) (i * 31 + 7);
        }
        try (Consumer<byte[]> c = consumer(topic, "s", SubscriptionType.Exclusive).subscribe();
             Producer<byte[]> p = client.newProducer().topic(topic).enableBatching(false).enableChunking(true)
                     .chunkMaxMessageSize(64 << 10).create()) {
            p.send(big);
            Message<byte[]> m = receive(c, "the chunked message");
            check(Arrays.equals(m.getValue(), big), "the 1 MiB message arrived altered (" + m.getValue().length + " bytes)");
        }
    }

    /** Tokens that expire every few seconds, renewed by the harness in tokenFile: the proxy
     * challenges the client, which answers with the file's current token. */
    static void tokenRefresh() throws Exception {
        String file = cfg.get("tokenFile");
        try (PulsarClient tc = PulsarClient.builder().serviceUrl(cfg.get("authUrl"))
                .authentication(AuthenticationFactory.token(() -> {
                    try {
                        return Files.readString(Paths.get(file)).trim();
                    } catch (java.io.IOException e) {
                        throw new RuntimeException(e);
                    }
                })).operationTimeout(30, TimeUnit.SECONDS).build();
             Consumer<byte[]> c = tc.newConsumer().topic(topic("refresh")).subscriptionName("s").subscribe();
             Producer<byte[]> p = tc.newProducer().topic(topic("refresh")).create()) {
            long end = System.currentTimeMillis() + 15_000;
            for (int i = 0; System.currentTimeMillis() < end; i++) {
                p.send(payload(i));
                Message<byte[]> m = receive(c, "message " + i);
                check(text(m).equals("m-" + i), "got " + text(m) + ", want m-" + i);
                c.acknowledge(m);
                Thread.sleep(200);
            }
        }
    }

    static void tls() throws Exception {
        try (PulsarClient tc = PulsarClient.builder().serviceUrl(cfg.get("tlsUrl"))
                .tlsTrustCertsFilePath(cfg.get("caFile")).enableTlsHostnameVerification(true)
                .operationTimeout(30, TimeUnit.SECONDS).build()) {
            roundtripWith(tc, topic("tls"), 10);
        }
    }

    static void mtls() throws Exception {
        try (PulsarClient tc = PulsarClient.builder().serviceUrl(cfg.get("mtlsUrl"))
                .tlsTrustCertsFilePath(cfg.get("caFile")).enableTlsHostnameVerification(true)
                .authentication(AuthenticationFactory.TLS(cfg.get("certFile"), cfg.get("keyFile")))
                .operationTimeout(30, TimeUnit.SECONDS).build()) {
            roundtripWith(tc, topic("mtls"), 10);
        }
    }
}
