// ProxyConfigProbe lists the settings of Apache Pulsar's proxy as its own ProxyConfiguration
// class has them, for proxyconf_test.go (which compiles it against the rig's Pulsar classpath):
// one line per instance field, "name<TAB>default", the default as proxy.conf would spell it
// (an empty Optional or null as nothing, a collection joined with commas).
import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.util.Collection;
import java.util.Optional;
import org.apache.pulsar.proxy.server.ProxyConfiguration;

public class ProxyConfigProbe {
    public static void main(String[] args) throws Exception {
        ProxyConfiguration config = new ProxyConfiguration();
        for (Field f : ProxyConfiguration.class.getDeclaredFields()) {
            if (Modifier.isStatic(f.getModifiers()) || f.getName().equals("properties")) {
                continue;
            }
            f.setAccessible(true);
            Object v = f.get(config);
            String s;
            if (v == null) {
                s = "";
            } else if (v instanceof Optional) {
                s = ((Optional<?>) v).map(Object::toString).orElse("");
            } else if (v instanceof Collection) {
                StringBuilder b = new StringBuilder();
                for (Object o : (Collection<?>) v) {
                    if (b.length() > 0) {
                        b.append(',');
                    }
                    b.append(o);
                }
                s = b.toString();
            } else {
                s = v.toString();
            }
            System.out.println(f.getName() + "\t" + s);
        }
    }
}
