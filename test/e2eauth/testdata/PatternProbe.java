// PatternProbe: the Java client side of the topic-list watcher test (test/e2eauth/watch_test.go).
// Given a service URL, a token and a topic pattern, it subscribes with a pattern consumer whose
// polling interval is an hour, prints "subscribed", and then prints "received KEY MILLIS" for the
// first message it gets (MILLIS since it subscribed) and exits 0; after 120 s without one it
// says so and exits 1. A topic created after the subscription can only reach it through a
// topic-list watcher: the polling would come an hour later.

import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;
import org.apache.pulsar.client.api.AuthenticationFactory;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;

public class PatternProbe {
    public static void main(String[] args) throws Exception {
        String url = args[0], token = args[1], pattern = args[2];
        try (PulsarClient client = PulsarClient.builder().serviceUrl(url)
                .authentication(AuthenticationFactory.token(token))
                .operationTimeout(60, TimeUnit.SECONDS).build()) {
            Consumer<byte[]> consumer = client.newConsumer().topicsPattern(Pattern.compile(pattern))
                    .subscriptionName("watch")
                    .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest)
                    .patternAutoDiscoveryPeriod(1, TimeUnit.HOURS).subscribe();
            long subscribed = System.currentTimeMillis();
            System.out.println("subscribed");
            System.out.flush();
            long deadline = subscribed + 120_000;
            while (true) {
                Message<byte[]> m = consumer.receive((int) Math.max(1, deadline - System.currentTimeMillis()), TimeUnit.MILLISECONDS);
                if (m == null) {
                    System.out.println("no message with key after in 120 s");
                    System.exit(1);
                }
                System.out.println("received " + m.getKey() + " " + (System.currentTimeMillis() - subscribed));
                System.out.flush();
                consumer.acknowledge(m);
                if ("after".equals(m.getKey())) {
                    break;
                }
            }
            consumer.close();
        }
    }
}
