// TopicNameProbe asks Pulsar's own org.apache.pulsar.common.naming.TopicName how it reads topic
// names, for topicname_test.go (which compiles it against the rig's Pulsar classpath).
//
// java TopicNameProbe names: each line of stdin is a name, base64 of its bytes, decoded as
// UTF-8 the way the broker decodes protocol strings (invalid bytes become U+FFFD). One line out
// per name, fields separated by tabs, strings as base64 of their UTF-8:
//
//	ok  domain tenant cluster|- namespacePortion localName partitionIndex partitionedTopicName toString
//	err exceptionClass message
//
// java TopicNameProbe chars: for every char (UTF-16 code unit) that is not a surrogate, one line
//
//	hex  getPartitionIndex("x-partition-" + c)  isBlank(c) ? 1 : 0  mask...
//
// with one bit mask per TopicDomain value: bit i is set when that value with its i-th char
// replaced by c still equalsIgnoreCase the value (what TopicDomain.getEnum compares).
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import org.apache.commons.lang3.StringUtils;
import org.apache.pulsar.common.naming.TopicDomain;
import org.apache.pulsar.common.naming.TopicName;

public class TopicNameProbe {
    private static String b64(String s) {
        return Base64.getEncoder().encodeToString(s.getBytes(StandardCharsets.UTF_8));
    }

    @SuppressWarnings("deprecation") // TopicName.getCluster, for legacy names
    public static void main(String[] args) throws Exception {
        PrintWriter out = new PrintWriter(System.out, false, StandardCharsets.UTF_8);
        if (args.length == 1 && args[0].equals("names")) {
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.US_ASCII));
            for (String line; (line = in.readLine()) != null; ) {
                String name = new String(Base64.getDecoder().decode(line.trim()), StandardCharsets.UTF_8);
                try {
                    TopicName t = TopicName.get(name);
                    String cluster = t.isV2() ? "-" : b64(t.getCluster());
                    out.println(String.join("\t", "ok", b64(t.getDomain().value()), b64(t.getTenant()), cluster,
                            b64(t.getNamespacePortion()), b64(t.getLocalName()),
                            Integer.toString(t.getPartitionIndex()), b64(t.getPartitionedTopicName()),
                            b64(t.toString())));
                } catch (RuntimeException e) {
                    out.println(String.join("\t", "err", e.getClass().getName(), b64(String.valueOf(e.getMessage()))));
                }
            }
        } else if (args.length == 1 && args[0].equals("chars")) {
            for (int c = 0; c <= 0xFFFF; c++) {
                if (Character.isSurrogate((char) c)) {
                    continue;
                }
                String s = String.valueOf((char) c);
                StringBuilder line = new StringBuilder(Integer.toHexString(c));
                line.append('\t').append(TopicName.getPartitionIndex("x-partition-" + s));
                line.append('\t').append(StringUtils.isBlank(s) ? 1 : 0);
                for (TopicDomain d : TopicDomain.values()) {
                    String v = d.value();
                    long mask = 0;
                    for (int i = 0; i < v.length(); i++) {
                        if (v.equalsIgnoreCase(v.substring(0, i) + s + v.substring(i + 1))) {
                            mask |= 1L << i;
                        }
                    }
                    line.append('\t').append(mask);
                }
                out.println(line);
            }
        } else {
            System.err.println("usage: TopicNameProbe names|chars");
            System.exit(2);
        }
        out.flush();
    }
}
