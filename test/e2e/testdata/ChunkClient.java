// ChunkClient: the Java client side of the chunking test (test/e2e/chunking_test.go). Given a
// service URL, a topic, a count and a size, it subscribes, produces COUNT messages of SIZE bytes
// with chunking on (batching off), receives them all and checks every byte. Message i is
// SHA-256("chunk-" + i) repeated to SIZE bytes, with key i, as the Go test builds it.
// Prints "ok COUNT" and exits 0, or says what went wrong and exits 1.

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.Arrays;
import java.util.HashSet;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;

public class ChunkClient {
    static byte[] payload(int i, int size) throws Exception {
        byte[] seed = MessageDigest.getInstance("SHA-256").digest(("chunk-" + i).getBytes(StandardCharsets.UTF_8));
        byte[] out = new byte[size];
        for (int k = 0; k < size; k++) {
            out[k] = seed[k % seed.length];
        }
        return out;
    }

    public static void main(String[] args) throws Exception {
        String url = args[0], topic = args[1];
        int count = Integer.parseInt(args[2]), size = Integer.parseInt(args[3]);
        try (PulsarClient client = PulsarClient.builder().serviceUrl(url)
                .operationTimeout(60, TimeUnit.SECONDS).build()) {
            Consumer<byte[]> consumer = client.newConsumer().topic(topic).subscriptionName("java")
                    .subscriptionType(SubscriptionType.Shared)
                    .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
            Producer<byte[]> producer = client.newProducer().topic(topic).enableChunking(true)
                    .enableBatching(false).sendTimeout(120, TimeUnit.SECONDS).create();
            for (int i = 0; i < count; i++) {
                producer.newMessage().key(Integer.toString(i)).value(payload(i, size)).send();
            }
            Set<Integer> seen = new HashSet<>();
            while (seen.size() < count) {
                Message<byte[]> m = consumer.receive(120, TimeUnit.SECONDS);
                if (m == null) {
                    System.out.println("timed out with " + seen.size() + " of " + count + " messages");
                    System.exit(1);
                }
                int i = Integer.parseInt(m.getKey());
                if (!Arrays.equals(m.getValue(), payload(i, size))) {
                    System.out.println("message " + i + " arrived altered (" + m.getValue().length + " bytes)");
                    System.exit(1);
                }
                seen.add(i);
                consumer.acknowledge(m);
            }
            producer.close();
            consumer.close();
            System.out.println("ok " + count);
        }
    }
}
