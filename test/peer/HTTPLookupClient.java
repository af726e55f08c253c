// HTTPLookupClient: the Java client of the peer clients check (test/peer/peer.sh clients). With
// an HTTP service URL (lookups over HTTP), it produces COUNT messages round robin over the
// partitions of TOPIC and consumes them all back, then prints
//   result sent=N received=N partitions=P
// (P: how many partitions it received from) and exits 0, or says what went wrong and exits 1.
// Arguments: SERVICE_URL TOPIC COUNT.

import java.nio.charset.StandardCharsets;
import java.util.HashSet;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageRoutingMode;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;

public class HTTPLookupClient {
    public static void main(String[] args) throws Exception {
        String url = args[0], topic = args[1];
        int count = Integer.parseInt(args[2]);
        try (PulsarClient client = PulsarClient.builder().serviceUrl(url).operationTimeout(30, TimeUnit.SECONDS).build();
             Consumer<byte[]> consumer = client.newConsumer().topic(topic).subscriptionName("java-http-lookup")
                     .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
             Producer<byte[]> producer = client.newProducer().topic(topic).enableBatching(false)
                     .messageRoutingMode(MessageRoutingMode.RoundRobinPartition).create()) {
            for (int i = 0; i < count; i++) {
                producer.send(("java-" + i).getBytes(StandardCharsets.UTF_8));
            }
            Set<String> got = new HashSet<>(), partitions = new HashSet<>();
            while (got.size() < count) {
                Message<byte[]> m = consumer.receive(30, TimeUnit.SECONDS);
                if (m == null) {
                    System.out.println("timed out after " + got.size() + " of " + count + " messages");
                    System.exit(1);
                }
                got.add(new String(m.getValue(), StandardCharsets.UTF_8));
                partitions.add(m.getTopicName());
                consumer.acknowledge(m);
            }
            System.out.println("result sent=" + count + " received=" + got.size() + " partitions=" + partitions.size());
        }
    }
}
