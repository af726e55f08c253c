import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.AuthenticationFactory;
import org.apache.pulsar.client.api.ClientBuilder;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageRoutingMode;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.ProxyProtocol;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;

/**
 * The Java client through an SNI proxy (proxyServiceUrl with ProxyProtocol.SNI, PIP-60): it
 * subscribes, produces COUNT messages round robin over the partitions of TOPIC, receives them,
 * prints one JSON line (sent, received, messages per partition), then keeps its consumer until
 * its standard input closes, so the test can read the brokers' topic stats meanwhile.
 *
 * Arguments: SERVICE_URL PROXY_URL TRUST_CERT TOPIC COUNT [CERT KEY]; with CERT and KEY it
 * authenticates with that client certificate (AuthenticationTls).
 */
public class SniClient {
  public static void main(String[] a) throws Exception {
    String topic = a[3];
    int count = Integer.parseInt(a[4]);
    ClientBuilder b = PulsarClient.builder().serviceUrl(a[0]).proxyServiceUrl(a[1], ProxyProtocol.SNI)
        .tlsTrustCertsFilePath(a[2]).enableTlsHostnameVerification(true)
        .operationTimeout(60, TimeUnit.SECONDS).connectionTimeout(20, TimeUnit.SECONDS);
    if (a.length > 6) {
      b.authentication(AuthenticationFactory.TLS(a[5], a[6]));
    }
    try (PulsarClient client = b.build()) {
      Consumer<byte[]> consumer = client.newConsumer().topic(topic).subscriptionName("sni")
          .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
      Producer<byte[]> producer = client.newProducer().topic(topic).enableBatching(false)
          .messageRoutingMode(MessageRoutingMode.RoundRobinPartition).create();
      for (int i = 0; i < count; i++) {
        producer.send(("sni-" + i).getBytes());
      }
      Map<String, Integer> perPartition = new TreeMap<>();
      int received = 0;
      for (; received < count; received++) {
        Message<byte[]> m = consumer.receive(60, TimeUnit.SECONDS);
        if (m == null) {
          break;
        }
        perPartition.merge(m.getTopicName(), 1, Integer::sum);
        consumer.acknowledge(m);
      }
      StringBuilder parts = new StringBuilder();
      for (Map.Entry<String, Integer> e : perPartition.entrySet()) {
        parts.append(parts.length() == 0 ? "" : ",").append('"').append(e.getKey()).append("\":").append(e.getValue());
      }
      System.out.println("{\"sent\":" + count + ",\"received\":" + received + ",\"partitions\":{" + parts + "}}");
      System.out.flush();
      new BufferedReader(new InputStreamReader(System.in)).readLine();
      producer.close();
      consumer.close();
    }
  }
}
