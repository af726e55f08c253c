// Package helm_test renders the chart with the pinned helm and checks what a cluster would
// run: probes and ports that match the proxy's config, the pod's security settings, a grace
// period longer than the drain, and a config.yaml that the proxy's own config.Load accepts.
package helm_test

import (
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pulsar-proxy/pulsar-proxy/internal/config"
	"github.com/pulsar-proxy/pulsar-proxy/internal/testkit/prereq"
)

const (
	chartDir       = "pulsar-proxy"
	tlsAuthValues  = "pulsar-proxy/ci/tls-auth-values.yaml"
	jwksValues     = "pulsar-proxy/ci/jwks-values.yaml"
	tlsOnlyValues  = "pulsar-proxy/ci/tls-only-values.yaml"
	operatorValues = "pulsar-proxy/ci/operator-values.yaml"
	configFileArgs = "--config /etc/pulsar-proxy/config.yaml"

	// defaultDiscovery is the brokers' headless Service of the Apache chart 4.6 and later
	// (release and namespace "pulsar"); tools/chartcheck checks the same name.
	defaultDiscovery = "_pulsar._tcp.pulsar-broker-headless.pulsar.svc.cluster.local"
)

// ciValues are the chart's ci/*.yaml values files: each a variant every test renders.
func ciValues(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chartDir, "ci", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no values files in %s/ci: %v", chartDir, err)
	}
	return files
}

// helmBinary is the pinned helm that test/rig/build-helm.sh builds into the cache (`make
// helm`: RIG_CACHE, default .cache, as helm-<HELM_VERSION of test/rig/versions.env>), or
// RIG_HELM_BIN. Without it the tests skip (saying why), or fail on CI. It reads the pin itself
// rather than through test/rig: that package lives in the test module, which this module
// does not require.
func helmBinary(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("RIG_HELM_BIN")
	if bin == "" {
		pins, err := os.ReadFile(filepath.Join("..", "test", "rig", "versions.env"))
		if err != nil {
			t.Fatal(err)
		}
		var version string
		for _, line := range strings.Split(string(pins), "\n") {
			if v, ok := strings.CutPrefix(line, "HELM_VERSION="); ok {
				version = strings.TrimSpace(v)
			}
		}
		if version == "" {
			t.Fatal("test/rig/versions.env has no HELM_VERSION")
		}
		cache := os.Getenv("RIG_CACHE")
		if cache == "" {
			cache = filepath.Join("..", ".cache")
		}
		bin = filepath.Join(cache, "helm-"+version)
	}
	_, err := os.Stat(bin)
	prereq.Need(t, "helm (`make helm` builds it: test/rig/build-helm.sh)", err)
	return bin
}

func TestLint(t *testing.T) {
	helm := helmBinary(t)
	variants := [][]string{{}}
	for _, f := range ciValues(t) {
		variants = append(variants, []string{"-f", f})
	}
	for _, args := range variants {
		out, err := exec.Command(helm, append([]string{"lint", "--strict", chartDir}, args...)...).CombinedOutput()
		if err != nil {
			t.Errorf("helm lint %q: %v\n%s", args, err, out)
		}
	}
}

func TestDefaults(t *testing.T) {
	objs := helmTemplate(t, helmBinary(t))
	cfg, pod := checkCommon(t, objs)

	if cfg.Discovery.DNS.Name != defaultDiscovery || cfg.Discovery.DNS.Record != "SRV" {
		t.Errorf("default discovery: %+v, want the SRV records of %s (the Apache chart's headless Service)", cfg.Discovery.DNS, defaultDiscovery)
	}
	if cfg.Listen.PulsarTLS != "" || pod.proxy().port("pulsar-ssl") != 0 || objs.get(t, "Service").servicePort("pulsar-ssl") != nil {
		t.Error("TLS is off by default, yet a TLS listener or port is rendered")
	}
	if cfg.Admin.ListenHTTPS != "" || pod.proxy().port("https") != 0 || objs.get(t, "Service").servicePort("https") != nil {
		t.Error("TLS is off by default, yet an HTTPS listener or port is rendered")
	}
	if !cfg.Admin.Enabled || cfg.Discovery.DNS.WebPort != 8080 {
		t.Errorf("admin API %v, brokers' web port %d: want on, 8080 (the Apache chart's brokers)", cfg.Admin.Enabled, cfg.Discovery.DNS.WebPort)
	}
	if d := objs.get(t, "Deployment"); d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas %v, want 2", d.Spec.Replicas)
	}
	objs.get(t, "PodDisruptionBudget")
	if len(pod.SecurityContext.Sysctls) != 0 {
		t.Errorf("sysctls %+v rendered, none by default", pod.SecurityContext.Sysctls)
	}
	for _, kind := range []string{"HorizontalPodAutoscaler", "ServiceMonitor"} {
		if _, ok := objs[kind]; ok {
			t.Errorf("%s rendered but off by default", kind)
		}
	}
}

// TestEveryCIValuesFile: each ci/*.yaml renders what checkCommon asks of every rendering,
// and a config.yaml the proxy loads (the TLS-only one and the operator's with extra volumes
// among them).
func TestEveryCIValuesFile(t *testing.T) {
	helm := helmBinary(t)
	for _, f := range ciValues(t) {
		t.Run(filepath.Base(f), func(t *testing.T) { checkCommon(t, helmTemplate(t, helm, "-f", f)) })
	}
}

// TestTLSOnly: config.listen.pulsar "" with cert-manager's certificate: the proxy loads a
// config without a plaintext listener, and neither the pod nor the Service has the port;
// without TLS the chart refuses it.
func TestTLSOnly(t *testing.T) {
	helm := helmBinary(t)
	objs := helmTemplate(t, helm, "-f", tlsOnlyValues)
	cfg, pod := checkCommon(t, objs)
	if cfg.Listen.Pulsar != "" || cfg.Listen.PulsarTLS == "" {
		t.Errorf("listen %+v, want TLS only", cfg.Listen)
	}
	if source, file := mountedFrom(pod, cfg.TLS.CertFile); source != "proxy-pulsar-proxy-tls" || file != "tls.crt" {
		t.Errorf("tls.certFile %q comes from %q key %q, want cert-manager's Secret proxy-pulsar-proxy-tls", cfg.TLS.CertFile, source, file)
	}
	out, err := exec.Command(helm, "template", "proxy", chartDir, "--set", "config.listen.pulsar=").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "config.listen.pulsar is empty (TLS only) but TLS is off") {
		t.Errorf("TLS only without TLS: %v\n%s", err, out)
	}
}

func TestTLSAndAuth(t *testing.T) {
	objs := helmTemplate(t, helmBinary(t), "-f", tlsAuthValues)
	cfg, pod := checkCommon(t, objs)
	c := pod.proxy()

	if p := port(t, cfg.Listen.PulsarTLS); c.port("pulsar-ssl") != p {
		t.Errorf("container port pulsar-ssl %d, listen.pulsarTLS %q", c.port("pulsar-ssl"), cfg.Listen.PulsarTLS)
	}
	svc := objs.get(t, "Service")
	if sp := svc.servicePort("pulsar-ssl"); sp == nil || sp.Port != 6651 || sp.TargetPort != "pulsar-ssl" {
		t.Errorf("service port pulsar-ssl: %+v", sp)
	}
	// The admin API over HTTPS, as the Apache chart's proxy: 443 to the container's 8443.
	if p := port(t, cfg.Admin.ListenHTTPS); c.port("https") != p || p != 8443 {
		t.Errorf("container port https %d, admin.listenHTTPS %q", c.port("https"), cfg.Admin.ListenHTTPS)
	}
	if sp := svc.servicePort("https"); sp == nil || sp.Port != 443 || sp.TargetPort != "https" {
		t.Errorf("service port https: %+v", sp)
	}
	if svc.Spec.Type != "LoadBalancer" || svc.Spec.ExternalTrafficPolicy != "Local" {
		t.Errorf("service type %q externalTrafficPolicy %q", svc.Spec.Type, svc.Spec.ExternalTrafficPolicy)
	}
	if !cfg.Auth.Enabled || !cfg.Authz.Enabled || !cfg.Broker.TLS.Enabled {
		t.Errorf("auth %v authz %v broker TLS %v, want all on", cfg.Auth.Enabled, cfg.Authz.Enabled, cfg.Broker.TLS.Enabled)
	}

	// Every file the config names comes from the Secret or ConfigMap (and key) it should.
	files := []struct{ key, path, source, file string }{
		{"tls.certFile", cfg.TLS.CertFile, "pulsar-proxy-tls", "tls.crt"},
		{"tls.keyFile", cfg.TLS.KeyFile, "pulsar-proxy-tls", "tls.key"},
		{"tls.clientCAFile", cfg.TLS.ClientCAFile, "pulsar-proxy-tls", "ca.crt"},
		{"broker.tls.trustCertsFile", cfg.Broker.TLS.TrustCertsFile, "pulsar-broker-ca", "ca.crt"},
		{"broker.tls.certFile", cfg.Broker.TLS.CertFile, "pulsar-broker-ca", "tls.crt"},
		{"broker.tls.keyFile", cfg.Broker.TLS.KeyFile, "pulsar-broker-ca", "tls.key"},
		{"auth.token.secretKeyFile", cfg.Auth.Token.SecretKeyFile, "pulsar-token-key", "secret.key"},
		{"auth.brokerClient.tokenFile", cfg.Auth.BrokerClient.TokenFile, "pulsar-proxy-token", "token"},
		{"authz.policyFile", cfg.Authz.PolicyFile, "pulsar-proxy-policy", "policy.yaml"},
	}
	for _, f := range files {
		if source, file := mountedFrom(pod, f.path); source != f.source || file != f.file {
			t.Errorf("%s = %q comes from %q key %q, want %q key %q", f.key, f.path, source, file, f.source, f.file)
		}
	}

	if d := objs.get(t, "Deployment"); d.Spec.Replicas != nil {
		t.Errorf("replicas %d set although the HorizontalPodAutoscaler owns them", *d.Spec.Replicas)
	}
	if hpa := objs.get(t, "HorizontalPodAutoscaler"); hpa.Spec.ScaleTargetRef.Name != objs.get(t, "Deployment").Metadata.Name {
		t.Errorf("HPA scales %q", hpa.Spec.ScaleTargetRef.Name)
	}
	if sm := objs.get(t, "ServiceMonitor"); len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "http" || sm.Spec.Endpoints[0].Path != "/metrics" {
		t.Errorf("ServiceMonitor endpoints %+v", sm.Spec.Endpoints)
	}
}

// TestSysctls: a wider ephemeral port range (docs/operations.md, Limits) reaches the pod.
func TestSysctls(t *testing.T) {
	objs := helmTemplate(t, helmBinary(t), "--set", "sysctls[0].name=net.ipv4.ip_local_port_range", "--set-string", "sysctls[0].value=1024 65535")
	_, pod := checkCommon(t, objs)
	if s := pod.SecurityContext.Sysctls; len(s) != 1 || s[0].Name != "net.ipv4.ip_local_port_range" || s[0].Value != "1024 65535" {
		t.Errorf("pod sysctls %+v, want the port range", s)
	}
}

// TestJWKS: tokens from an identity provider's key set; its CA comes from the Secret the
// values name, and the rendered config loads.
func TestJWKS(t *testing.T) {
	objs := helmTemplate(t, helmBinary(t), "-f", jwksValues)
	cfg, pod := checkCommon(t, objs)
	if cfg.Auth.Token.JWKSURL == "" {
		t.Fatal("auth.token.jwksURL lost in the rendering")
	}
	if source, file := mountedFrom(pod, cfg.Auth.Token.JWKSCAFile); source != "idp-ca" || file != "ca.crt" {
		t.Errorf("auth.token.jwksCAFile = %q comes from %q key %q, want idp-ca key ca.crt", cfg.Auth.Token.JWKSCAFile, source, file)
	}
}

// TestConfigChangeRollsPods: the pod template's checksum follows the config.
func TestConfigChangeRollsPods(t *testing.T) {
	helm := helmBinary(t)
	sum := func(args ...string) string {
		return helmTemplate(t, helm, args...).get(t, "Deployment").Spec.Template.Metadata.Annotations["checksum/config"]
	}
	a, b := sum(), sum("--set", "config.log.level=debug")
	if a == "" || a == b {
		t.Errorf("checksum/config %q before and %q after a config change", a, b)
	}
}

// checkCommon checks what every rendering must get right and returns the loaded config and
// the pod spec.
func checkCommon(t *testing.T, objs rendered) (*config.Config, podSpec) {
	t.Helper()
	cm := objs.get(t, "ConfigMap")
	file := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(file, []byte(cm.Data["config.yaml"]), 0o644); err != nil {
		t.Fatal(err)
	}
	// The strongest check: the proxy itself accepts the rendered file (no environment).
	cfg, err := config.Load(file, nil)
	if err != nil {
		t.Fatalf("the proxy refuses the rendered config.yaml: %v\n%s", err, cm.Data["config.yaml"])
	}

	d := objs.get(t, "Deployment")
	pod := d.Spec.Template.Spec
	c := pod.proxy()
	if c.Name != "pulsar-proxy" {
		t.Fatalf("no container named pulsar-proxy in %d", len(pod.Containers))
	}

	if strings.Join(c.Args, " ") != configFileArgs {
		t.Errorf("args %q, want %q", c.Args, configFileArgs)
	}
	if source, file := mountedFrom(pod, "/etc/pulsar-proxy/config.yaml"); source != cm.Metadata.Name || file != "config.yaml" {
		t.Errorf("config.yaml comes from %q key %q, want ConfigMap %q", source, file, cm.Metadata.Name)
	}

	// Probes on listen.http.
	httpPort := port(t, cfg.Listen.HTTP)
	for _, p := range []struct {
		name, path string
		probe      *probe
	}{{"startup", "/healthz", c.StartupProbe}, {"liveness", "/healthz", c.LivenessProbe}, {"readiness", "/readyz", c.ReadinessProbe}} {
		if p.probe == nil || p.probe.HTTPGet.Path != p.path || probePort(c, *p.probe) != httpPort {
			t.Errorf("%s probe %+v, want %s on listen.http's port %d", p.name, p.probe, p.path, httpPort)
		}
	}
	svc := objs.get(t, "Service")
	// The admin API on the http port, as the Apache chart's proxy: 80 to the container's 8080.
	want := map[string]int{"http": 80}
	if cfg.Listen.Pulsar != "" {
		want["pulsar"] = 6650
		if c.port("pulsar") != port(t, cfg.Listen.Pulsar) {
			t.Errorf("container port pulsar %d, listen.pulsar %q", c.port("pulsar"), cfg.Listen.Pulsar)
		}
	} else if c.port("pulsar") != 0 || svc.servicePort("pulsar") != nil {
		t.Error("TLS only (listen.pulsar empty), yet a plaintext pulsar port is rendered")
	}
	for name, want := range want {
		if sp := svc.servicePort(name); sp == nil || sp.Port != want || sp.TargetPort != name {
			t.Errorf("service port %s: %+v, want %d to the container's %s", name, sp, want, name)
		}
	}

	// Security.
	sc := c.SecurityContext
	if !pod.SecurityContext.RunAsNonRoot || pod.SecurityContext.RunAsUser != 65532 || !sc.RunAsNonRoot {
		t.Errorf("pod runs as non-root %v, user %d", pod.SecurityContext.RunAsNonRoot, pod.SecurityContext.RunAsUser)
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || !sc.ReadOnlyRootFilesystem || !slices.Equal(sc.Capabilities.Drop, []string{"ALL"}) {
		t.Errorf("container securityContext %+v", sc)
	}
	// The admin proxy's request-body spool: a writable /tmp on the read-only root, larger
	// than what the proxy keeps there at most.
	if m := mountPath(pod, "/tmp"); m == nil || m.EmptyDir == nil || m.EmptyDir.SizeLimit == "" {
		t.Errorf("no sized emptyDir on /tmp: %+v", m)
	} else if size := quantity(t, m.EmptyDir.SizeLimit); cfg.Admin.MaxSpooledBytes >= size {
		t.Errorf("admin.maxSpooledBytes %d does not fit the /tmp emptyDir of %s", cfg.Admin.MaxSpooledBytes, m.EmptyDir.SizeLimit)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the service account token is mounted; the proxy never uses it")
	}
	if c.Resources.Requests["cpu"] == "" || c.Resources.Requests["memory"] == "" || c.Resources.Limits["memory"] == "" {
		t.Errorf("resources %+v", c.Resources)
	}

	// Shutdown: the preStop sleep, then the whole drain, must fit in the grace period.
	preStop := time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	grace := time.Duration(pod.TerminationGracePeriodSeconds) * time.Second
	if preStop <= 0 || grace <= preStop+cfg.Session.DrainTimeout {
		t.Errorf("terminationGracePeriodSeconds %v, preStop sleep %v, session.drainTimeout %v: the drain would be cut short", grace, preStop, cfg.Session.DrainTimeout)
	}
	return cfg, pod
}

// mountedFrom names the Secret or ConfigMap, and its key, that a file path in the container
// comes from ("" when no volume mount holds it).
func mountedFrom(pod podSpec, file string) (source, key string) {
	for _, m := range pod.proxy().VolumeMounts {
		if path.Dir(file) != m.MountPath {
			continue
		}
		for _, v := range pod.Volumes {
			switch {
			case v.Name != m.Name:
			case v.Secret != nil:
				return v.Secret.SecretName, path.Base(file)
			case v.ConfigMap != nil:
				return v.ConfigMap.Name, path.Base(file)
			}
		}
	}
	return "", ""
}

// mountPath is the volume mounted exactly at dir (nil when none is).
func mountPath(pod podSpec, dir string) *volume {
	for _, m := range pod.proxy().VolumeMounts {
		if m.MountPath != dir {
			continue
		}
		for i, v := range pod.Volumes {
			if v.Name == m.Name {
				return &pod.Volumes[i]
			}
		}
	}
	return nil
}

// probePort resolves a probe's port, named or numbered, to a number.
func probePort(c container, p probe) int {
	if n, err := strconv.Atoi(p.HTTPGet.Port); err == nil {
		return n
	}
	return c.port(p.HTTPGet.Port)
}

func port(t *testing.T, addr string) int {
	t.Helper()
	i := strings.LastIndexByte(addr, ':')
	n, err := strconv.Atoi(addr[i+1:])
	if i < 0 || err != nil {
		t.Fatalf("listen address %q has no port", addr)
	}
	return n
}

// quantity reads a Kubernetes quantity of bytes with a binary suffix (Ki, Mi, Gi, Ti) or none.
func quantity(t *testing.T, q string) int64 {
	t.Helper()
	shift := map[string]int{"": 0, "Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40}
	num := strings.TrimRight(q, "KMGTi")
	n, err := strconv.ParseInt(num, 10, 64)
	s, ok := shift[q[len(num):]]
	if err != nil || !ok {
		t.Fatalf("quantity %q: want digits and Ki, Mi, Gi or Ti", q)
	}
	return n << s
}
