// CrossClient: the Java client's side of the WebSocket cross-API test
// (test/e2e/websocket_test.go). Arguments: URL TOPIC produce|consume COUNT PREFIX.
// produce: COUNT messages, batched and LZ4-compressed, message i with key i and property
// i=<i>. consume: subscribe from the earliest message and receive COUNT messages, each as
// produced (payload, key, property). Message i's payload is pyclient.py's: "<prefix>-<i, 8
// digits>-" and i % 700 filler bytes (the hex SHA-256 of that header, repeated).
// Prints "ok COUNT" and exits 0, or says what went wrong and exits 1.

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.Arrays;
import java.util.HashSet;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.CompressionType;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;

public class CrossClient {
    static byte[] payload(String prefix, int i) throws Exception {
        String head = String.format("%s-%08d-", prefix, i);
        byte[] sum = MessageDigest.getInstance("SHA-256").digest(head.getBytes(StandardCharsets.UTF_8));
        StringBuilder hex = new StringBuilder();
        for (byte b : sum) {
            hex.append(String.format("%02x", b));
        }
        StringBuilder out = new StringBuilder(head);
        for (int n = i % 700; n > 0; n -= Math.min(n, hex.length())) {
            out.append(hex, 0, Math.min(n, hex.length()));
        }
        return out.toString().getBytes(StandardCharsets.UTF_8);
    }

    public static void main(String[] args) throws Exception {
        String url = args[0], topic = args[1], mode = args[2], prefix = args[4];
        int count = Integer.parseInt(args[3]);
        try (PulsarClient client = PulsarClient.builder().serviceUrl(url)
                .operationTimeout(60, TimeUnit.SECONDS).build()) {
            if (mode.equals("produce")) {
                Producer<byte[]> producer = client.newProducer().topic(topic).enableBatching(true)
                        .compressionType(CompressionType.LZ4).create();
                for (int i = 0; i < count; i++) {
                    producer.newMessage().key(Integer.toString(i)).property("i", Integer.toString(i))
                            .value(payload(prefix, i)).sendAsync();
                }
                producer.flush();
                producer.close();
                System.out.println("ok " + count);
                return;
            }
            Consumer<byte[]> consumer = client.newConsumer().topic(topic).subscriptionName("java")
                    .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
            Set<Integer> seen = new HashSet<>();
            while (seen.size() < count) {
                Message<byte[]> m = consumer.receive(60, TimeUnit.SECONDS);
                if (m == null) {
                    System.out.println("timed out with " + seen.size() + " of " + count + " messages");
                    System.exit(1);
                }
                int i = Integer.parseInt(m.getKey());
                if (!Arrays.equals(m.getValue(), payload(prefix, i)) || !Integer.toString(i).equals(m.getProperty("i"))) {
                    System.out.println("message " + i + " arrived altered");
                    System.exit(1);
                }
                seen.add(i);
                consumer.acknowledge(m);
            }
            consumer.close();
            System.out.println("ok " + count);
        }
    }
}
