package config

import (
	"testing"
	"time"
)

func TestMetadataStoreValidation(t *testing.T) {
	const (
		url = "PULSAR_PROXY_DISCOVERY_METADATA_STORE_URL="
		ms  = "PULSAR_PROXY_DISCOVERY_METADATA_STORE_"
	)
	checkEnvCases(t, []envCase{
		{[]string{url + "zk:zk-0:2181,zk-1:2181/pulsar"}, ""},
		{[]string{url + "zk-0,zk-1"}, ""},
		{[]string{url + "etcd:http://etcd:2379"}, "discovery.metadataStore.url: \"etcd:http://etcd:2379\": only ZooKeeper is supported"},
		{[]string{url + "zk:a:1,,b:2"}, "discovery.metadataStore.url: empty server"},
		{[]string{url + "zk:a:1/p/"}, "discovery.metadataStore.url: chroot \"/p/\""},
		{[]string{url + "zk:a", ms + "SESSION_TIMEOUT=100ms"}, "discovery.metadataStore.sessionTimeout: must be between 1s and 10m"},
		{[]string{url + "zk:a", ms + "DIGEST=nocolon"}, "discovery.metadataStore.digest: want user:password"},
		{[]string{url + "zk:a", ms + "DIGEST=u:p", ms + "DIGEST_FILE=/f"}, "set digest or digestFile, not both"},
		{[]string{url + "zk:a", ms + "TLS_CERT_FILE=/c.pem"}, "discovery.metadataStore.tls.certFile: certFile and keyFile go together"},
		// A TLS file implies tls.enabled; set off, it is a contradiction.
		{[]string{url + "zk:a", ms + "TLS_TRUST_CERTS_FILE=/ca.pem"}, ""},
		{[]string{url + "zk:a", ms + "TLS_TRUST_CERTS_FILE=/ca.pem", ms + "TLS_ENABLED=false"}, "discovery.metadataStore.tls.enabled: TLS files or options are set but tls.enabled is false"},
		{[]string{url + "zk:a", ms + "TLS_ENABLED=true", ms + "TLS_TRUST_CERTS_FILE=/ca.pem", ms + "TLS_CERT_FILE=/c.pem", ms + "TLS_KEY_FILE=/k.pem"}, ""},
	})
	// The provider alone is enough discovery.
	cfg, err := Load(writeFile(t, "discovery: {metadataStore: {url: \"zk:127.0.0.1:12181\", listenerName: internal}}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if m := cfg.Discovery.MetadataStore; m.SessionTimeout != 30*time.Second || m.ListenerName != "internal" {
		t.Fatalf("%+v", m)
	}
}
