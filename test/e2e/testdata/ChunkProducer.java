// ChunkProducer: produces COUNT messages of SIZE bytes with the Java client's chunking on
// (batching off) for the WebSocket chunking test (test/e2e/websocket_chunks_test.go). Message
// i is SHA-256("chunk-" + i) repeated to SIZE bytes, with key i, as the Go test builds it.
// Prints "sent COUNT" and exits 0, or says what went wrong and exits 1.

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;

public class ChunkProducer {
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
                .operationTimeout(60, TimeUnit.SECONDS).build();
             Producer<byte[]> producer = client.newProducer().topic(topic).enableChunking(true)
                    .enableBatching(false).sendTimeout(120, TimeUnit.SECONDS).create()) {
            for (int i = 0; i < count; i++) {
                MessageId id = producer.newMessage().key(Integer.toString(i)).value(payload(i, size)).send();
                System.out.println("message " + i + " stored as " + id);
            }
            System.out.println("sent " + count);
        }
    }
}
