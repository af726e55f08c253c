package chartcheck

import (
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
)

// Each feature of the chart, on and off, read from the typed objects.

func ciFile(name string) []string { return []string{"-f", filepath.Join(chartDir, "ci", name)} }

func deployment(t *testing.T, r Rendered) (*appsv1.Deployment, *corev1.PodSpec, *corev1.Container) {
	t.Helper()
	d, ok, err := One[*appsv1.Deployment](r)
	if !ok || err != nil {
		t.Fatalf("one Deployment: %v", err)
	}
	pod := &d.Spec.Template.Spec
	c := ProxyContainer(pod)
	if c == nil {
		t.Fatal("no pulsar-proxy container")
	}
	return d, pod, c
}

func service(t *testing.T, r Rendered) *corev1.Service {
	t.Helper()
	s, ok, err := One[*corev1.Service](r)
	if !ok || err != nil {
		t.Fatalf("one Service: %v", err)
	}
	return s
}

func testPod(t *testing.T, r Rendered) *corev1.Pod {
	t.Helper()
	p, ok := Named[*corev1.Pod](r, "proxy-pulsar-proxy-check-config")
	if !ok {
		t.Fatal("no check-config test Pod")
	}
	return p
}

// TestDefaultDiscoveryIsTheApacheChartsHeadlessService: the SRV records of
// pulsar-broker-headless, the headless Service of the Apache chart 4.6 and later.
func TestDefaultDiscoveryIsTheApacheChartsHeadlessService(t *testing.T) {
	cfg := proxyConfig(t, render(t, helmBinary(t)))
	if got := dig(cfg, "discovery", "dns", "name"); got != "_pulsar._tcp.pulsar-broker-headless.pulsar.svc.cluster.local" || dig(cfg, "discovery", "dns", "record") != "SRV" {
		t.Errorf("discovery.dns %v", dig(cfg, "discovery", "dns"))
	}
}

// TestExtraVolumes: none by default; the operator's values mount the ZooKeeper client
// Secret in the proxy and in the check-config test Pod, where its config looks for it.
func TestExtraVolumes(t *testing.T) {
	helm := helmBinary(t)
	_, pod, c := deployment(t, render(t, helm))
	if names := volumeNames(pod); !slices.Equal(names, []string{"config", "tmp"}) {
		t.Errorf("default volumes %v, want config and tmp", names)
	}
	r := render(t, helm, ciFile("operator-values.yaml")...)
	_, pod, c = deployment(t, r)
	var zk *corev1.Volume
	for i, v := range pod.Volumes {
		if v.Name == "zk-client" {
			zk = &pod.Volumes[i]
		}
	}
	if zk == nil || zk.Secret == nil || zk.Secret.SecretName != "pulsar-zk-client" {
		t.Fatalf("zk-client volume %+v", zk)
	}
	mount := func(c *corev1.Container) string {
		for _, m := range c.VolumeMounts {
			if m.Name == "zk-client" && m.ReadOnly {
				return m.MountPath
			}
		}
		return ""
	}
	cfg := proxyConfig(t, r)
	if dir := mount(c); dir == "" || filepath.Dir(dig(cfg, "discovery", "metadataStore", "digestFile").(string)) != dir {
		t.Errorf("zk-client mounted at %q, the config's digestFile is %v", dir, dig(cfg, "discovery", "metadataStore", "digestFile"))
	}
	tp := testPod(t, r)
	if !reflect.DeepEqual(tp.Spec.Volumes, pod.Volumes) || !reflect.DeepEqual(tp.Spec.Containers[0].VolumeMounts, c.VolumeMounts) {
		t.Error("the check-config test Pod's volumes or mounts differ from the proxy's")
	}
}

// TestInitContainersAndSidecars: none by default; the operator's init container runs before
// the proxy and before the check-config test, the sidecar beside the proxy only.
func TestInitContainersAndSidecars(t *testing.T) {
	helm := helmBinary(t)
	r := render(t, helm)
	_, pod, _ := deployment(t, r)
	if len(pod.InitContainers) != 0 || len(pod.Containers) != 1 || len(testPod(t, r).Spec.InitContainers) != 0 {
		t.Errorf("default: %d init containers, %d containers", len(pod.InitContainers), len(pod.Containers))
	}
	r = render(t, helm, ciFile("operator-values.yaml")...)
	_, pod, _ = deployment(t, r)
	if len(pod.InitContainers) != 1 || pod.InitContainers[0].Name != "wait-for-zookeeper" {
		t.Errorf("init containers %v", pod.InitContainers)
	}
	if len(pod.Containers) != 2 || pod.Containers[0].Name != "pulsar-proxy" || pod.Containers[1].Name != "log-shipper" {
		t.Errorf("containers %v, want pulsar-proxy then log-shipper", pod.Containers)
	}
	tp := testPod(t, r)
	if !reflect.DeepEqual(tp.Spec.InitContainers, pod.InitContainers) || len(tp.Spec.Containers) != 1 {
		t.Errorf("check-config test Pod: init containers %v, %d containers; want the proxy's init containers and no sidecar", tp.Spec.InitContainers, len(tp.Spec.Containers))
	}
}

// TestCertManager: no Certificate by default; with tls.certManager the Certificate's Secret
// is the one the pods mount as tls, issued for the Service's names and the extra ones.
func TestCertManager(t *testing.T) {
	helm := helmBinary(t)
	for _, args := range [][]string{nil, {"--set", "tls.enabled=true", "--set", "tls.secretName=own"}} {
		if c := All[*Certificate](render(t, helm, args...)); len(c) != 0 {
			t.Errorf("%q: a Certificate is rendered", args)
		}
	}
	r := render(t, helm, ciFile("tls-only-values.yaml")...)
	cert, ok, _ := One[*Certificate](r)
	if !ok {
		t.Fatal("no Certificate")
	}
	_, pod, _ := deployment(t, r)
	var tls *corev1.Volume
	for i, v := range pod.Volumes {
		if v.Name == "tls" {
			tls = &pod.Volumes[i]
		}
	}
	if tls == nil || tls.Secret == nil || tls.Secret.SecretName != cert.Spec.SecretName || cert.Spec.SecretName != "proxy-pulsar-proxy-tls" {
		t.Errorf("Certificate's Secret %q, tls volume %+v", cert.Spec.SecretName, tls)
	}
	want := []string{"proxy-pulsar-proxy", "proxy-pulsar-proxy.default", "proxy-pulsar-proxy.default.svc", "proxy-pulsar-proxy.default.svc.cluster.local", "pulsar.example.com"}
	if !slices.Equal(cert.Spec.DNSNames, want) {
		t.Errorf("dnsNames %v, want %v", cert.Spec.DNSNames, want)
	}
	if ref := cert.Spec.IssuerRef; ref.Name != "pulsar-ca" || ref.Kind != "ClusterIssuer" || ref.Group != "cert-manager.io" {
		t.Errorf("issuerRef %+v", ref)
	}
	if cert.Spec.PrivateKey == nil || cert.Spec.PrivateKey.RotationPolicy != "Always" || cert.Spec.Duration == nil || cert.Spec.Duration.Duration.Hours() != 2160 {
		t.Errorf("privateKey %+v, duration %v", cert.Spec.PrivateKey, cert.Spec.Duration)
	}
}

// TestTLSOnly: by default and with TLS beside plaintext the pulsar port is in the pod and the
// Service; with config.listen.pulsar "" only pulsar-ssl is.
func TestTLSOnly(t *testing.T) {
	helm := helmBinary(t)
	for _, c := range []struct {
		args []string
		want []string
	}{
		{nil, []string{"pulsar", "http"}},
		{ciFile("tls-auth-values.yaml"), []string{"pulsar", "pulsar-ssl", "http", "https"}},
		{ciFile("tls-only-values.yaml"), []string{"pulsar-ssl", "http", "https"}},
		{[]string{"--set", "tls.enabled=true", "--set", "tls.secretName=s", "--set", "config.listen.pulsar=", "--set", "config.admin.enabled=false"}, []string{"pulsar-ssl", "http"}},
	} {
		r := render(t, helm, c.args...)
		_, _, ctr := deployment(t, r)
		if got := PortNames(ctr.Ports); !slices.Equal(got, c.want) {
			t.Errorf("%q: container ports %v, want %v", c.args, got, c.want)
		}
		if got := PortNames(service(t, r).Spec.Ports); !slices.Equal(got, c.want) {
			t.Errorf("%q: Service ports %v, want %v", c.args, got, c.want)
		}
	}
}

// TestServiceExposure: a ClusterIP Service carries no load balancer fields or node ports
// even when values name them; LoadBalancer carries its class, address, source ranges and
// node ports; NodePort its node ports.
func TestServiceExposure(t *testing.T) {
	helm := helmBinary(t)
	s := service(t, render(t, helm, "--set", "service.loadBalancerIP=192.0.2.1", "--set", "service.loadBalancerClass=x", "--set", "service.nodePorts.pulsar=30650"))
	if s.Spec.Type != corev1.ServiceTypeClusterIP || s.Spec.LoadBalancerIP != "" || s.Spec.LoadBalancerClass != nil || s.Spec.Ports[0].NodePort != 0 {
		t.Errorf("ClusterIP Service: %+v", s.Spec)
	}
	s = service(t, render(t, helm, ciFile("operator-values.yaml")...))
	if s.Spec.Type != corev1.ServiceTypeLoadBalancer || s.Spec.LoadBalancerIP != "192.0.2.10" || s.Spec.LoadBalancerClass == nil ||
		*s.Spec.LoadBalancerClass != "metallb.io/metallb" || !slices.Equal(s.Spec.LoadBalancerSourceRanges, []string{"198.51.100.0/24"}) {
		t.Errorf("LoadBalancer Service: %+v", s.Spec)
	}
	nodePorts := map[string]int32{}
	for _, p := range s.Spec.Ports {
		nodePorts[p.Name] = p.NodePort
	}
	if !reflect.DeepEqual(nodePorts, map[string]int32{"pulsar": 30650, "http": 30080}) {
		t.Errorf("node ports %v", nodePorts)
	}
	s = service(t, render(t, helm, "--set", "service.type=NodePort", "--set", "service.nodePorts.pulsar=30650"))
	if s.Spec.Type != corev1.ServiceTypeNodePort || s.Spec.Ports[0].Name != "pulsar" || s.Spec.Ports[0].NodePort != 30650 || s.Spec.Ports[1].NodePort != 0 {
		t.Errorf("NodePort Service: %+v", s.Spec.Ports)
	}
}

// TestProbes: startup, liveness and readiness with the defaults' timings; each timing from
// the values; the startup probe off on request.
func TestProbes(t *testing.T) {
	helm := helmBinary(t)
	type timing struct{ delay, period, timeout, failure, success int32 }
	of := func(p *corev1.Probe) *timing {
		if p == nil {
			return nil
		}
		return &timing{p.InitialDelaySeconds, p.PeriodSeconds, p.TimeoutSeconds, p.FailureThreshold, p.SuccessThreshold}
	}
	check := func(args []string, startup, liveness, readiness *timing) {
		t.Helper()
		_, _, c := deployment(t, render(t, helm, args...))
		for name, got := range map[string][2]*timing{"startup": {of(c.StartupProbe), startup}, "liveness": {of(c.LivenessProbe), liveness}, "readiness": {of(c.ReadinessProbe), readiness}} {
			if !reflect.DeepEqual(got[0], got[1]) {
				t.Errorf("%q: %s probe %+v, want %+v", args, name, got[0], got[1])
			}
		}
	}
	check(nil, &timing{0, 2, 2, 30, 0}, &timing{0, 10, 2, 3, 0}, &timing{0, 5, 2, 2, 1})
	check(ciFile("operator-values.yaml"), &timing{1, 3, 3, 40, 0}, &timing{5, 15, 4, 5, 0}, &timing{2, 3, 1, 3, 2})
	check([]string{"--set", "probe.startup.enabled=false", "--set", "probe.liveness.initialDelaySeconds=30"}, nil, &timing{30, 10, 2, 3, 0}, &timing{0, 5, 2, 2, 1})
}

// TestSpreading: by default a preferred anti-affinity per node and a zone spread that
// schedules anyway; hard makes it required; none and topologySpread.enabled=false leave
// both out; an affinity of one's own keeps the default anti-affinity beside it unless it
// names its own, and topologySpreadConstraints replace the default spread.
func TestSpreading(t *testing.T) {
	helm := helmBinary(t)
	_, pod, _ := deployment(t, render(t, helm))
	aa := pod.Affinity.PodAntiAffinity
	if aa == nil || len(aa.PreferredDuringSchedulingIgnoredDuringExecution) != 1 || aa.RequiredDuringSchedulingIgnoredDuringExecution != nil ||
		aa.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.TopologyKey != "kubernetes.io/hostname" {
		t.Errorf("default anti-affinity %+v", aa)
	}
	if ts := pod.TopologySpreadConstraints; len(ts) != 1 || ts[0].TopologyKey != "topology.kubernetes.io/zone" ||
		ts[0].WhenUnsatisfiable != corev1.ScheduleAnyway || !slices.Equal(ts[0].MatchLabelKeys, []string{"pod-template-hash"}) {
		t.Errorf("default topology spread %+v", ts)
	}
	_, pod, _ = deployment(t, render(t, helm, "--set", "podAntiAffinity.type=hard"))
	if aa := pod.Affinity.PodAntiAffinity; len(aa.RequiredDuringSchedulingIgnoredDuringExecution) != 1 || aa.PreferredDuringSchedulingIgnoredDuringExecution != nil {
		t.Errorf("hard anti-affinity %+v", aa)
	}
	_, pod, _ = deployment(t, render(t, helm, "--set", "podAntiAffinity.type=none", "--set", "topologySpread.enabled=false"))
	if pod.Affinity != nil || pod.TopologySpreadConstraints != nil {
		t.Errorf("none: affinity %+v, spread %+v", pod.Affinity, pod.TopologySpreadConstraints)
	}
	_, pod, _ = deployment(t, render(t, helm, "--set-json", `affinity={"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"pool","operator":"In","values":["pulsar"]}]}]}}}`))
	if pod.Affinity.NodeAffinity == nil || pod.Affinity.PodAntiAffinity == nil {
		t.Errorf("own node affinity: %+v, want it beside the default anti-affinity", pod.Affinity)
	}
	_, pod, _ = deployment(t, render(t, helm, "--set-json", `affinity={"podAntiAffinity":{"preferredDuringSchedulingIgnoredDuringExecution":[{"weight":1,"podAffinityTerm":{"topologyKey":"rack","labelSelector":{"matchLabels":{"app.kubernetes.io/name":"pulsar-proxy"}}}}]}}`))
	if terms := pod.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution; len(terms) != 1 || terms[0].PodAffinityTerm.TopologyKey != "rack" {
		t.Errorf("own anti-affinity %+v, want it alone", terms)
	}
	_, pod, _ = deployment(t, render(t, helm, ciFile("operator-values.yaml")...))
	if ts := pod.TopologySpreadConstraints; len(ts) != 1 || ts[0].WhenUnsatisfiable != corev1.DoNotSchedule {
		t.Errorf("own topology spread %+v", ts)
	}
}

// TestAutoscaling: no HPA by default (the Deployment holds replicas); on, CPU and the
// default scale-down behaviour; the operator's CPU, memory and sessions per pod with its own
// behaviour; a custom metric alone without the CPU target and Kubernetes' default behaviour.
func TestAutoscaling(t *testing.T) {
	helm := helmBinary(t)
	r := render(t, helm)
	if d, _, _ := deployment(t, r); len(All[*autoscalingv2.HorizontalPodAutoscaler](r)) != 0 || d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Error("an HPA by default, or no replicas on the Deployment")
	}
	hpa := func(args ...string) *autoscalingv2.HorizontalPodAutoscaler {
		t.Helper()
		h, ok, _ := One[*autoscalingv2.HorizontalPodAutoscaler](render(t, helm, args...))
		if !ok {
			t.Fatalf("%q: no HPA", args)
		}
		return h
	}
	kinds := func(h *autoscalingv2.HorizontalPodAutoscaler) []string {
		var out []string
		for _, m := range h.Spec.Metrics {
			switch {
			case m.Resource != nil:
				out = append(out, string(m.Resource.Name))
			case m.Pods != nil:
				out = append(out, m.Pods.Metric.Name)
			}
		}
		return out
	}
	h := hpa("--set", "autoscaling.enabled=true")
	if !slices.Equal(kinds(h), []string{"cpu"}) || h.Spec.Behavior == nil || h.Spec.Behavior.ScaleDown == nil ||
		*h.Spec.Behavior.ScaleDown.StabilizationWindowSeconds != 300 || h.Spec.Behavior.ScaleDown.Policies[0].Value != 1 {
		t.Errorf("default HPA: metrics %v, behavior %+v", kinds(h), h.Spec.Behavior)
	}
	h = hpa(ciFile("operator-values.yaml")...)
	if !slices.Equal(kinds(h), []string{"cpu", "memory", "pulsar_proxy_sessions_active"}) || h.Spec.Behavior.ScaleUp == nil || *h.Spec.Behavior.ScaleDown.StabilizationWindowSeconds != 600 {
		t.Errorf("operator's HPA: metrics %v, behavior %+v", kinds(h), h.Spec.Behavior)
	}
	h = hpa("--set", "autoscaling.enabled=true", "--set", "autoscaling.targetCPUUtilizationPercentage=0", "--set", "autoscaling.behavior=null",
		"--set-json", `autoscaling.metrics=[{"type":"Pods","pods":{"metric":{"name":"pulsar_proxy_sessions_active"},"target":{"type":"AverageValue","averageValue":"5000"}}}]`)
	if !slices.Equal(kinds(h), []string{"pulsar_proxy_sessions_active"}) || h.Spec.Behavior != nil {
		t.Errorf("custom metric alone: metrics %v, behavior %+v", kinds(h), h.Spec.Behavior)
	}
}

// TestPodMonitor: off by default; on, it scrapes the pods' http port on /metrics with the
// values' labels, timeout and relabelings; it and the ServiceMonitor are not both rendered.
func TestPodMonitor(t *testing.T) {
	helm := helmBinary(t)
	if len(All[*monitoringv1.PodMonitor](render(t, helm))) != 0 {
		t.Error("a PodMonitor by default")
	}
	pm, ok, _ := One[*monitoringv1.PodMonitor](render(t, helm, ciFile("tls-only-values.yaml")...))
	if !ok {
		t.Fatal("no PodMonitor")
	}
	if len(pm.Spec.PodMetricsEndpoints) != 1 {
		t.Fatalf("endpoints %+v", pm.Spec.PodMetricsEndpoints)
	}
	ep := pm.Spec.PodMetricsEndpoints[0]
	if *ep.Port != "http" || ep.Path != "/metrics" || ep.ScrapeTimeout != "10s" || len(ep.MetricRelabelConfigs) != 1 || pm.Labels["release"] != "kube-prometheus-stack" {
		t.Errorf("PodMonitor %+v, endpoint %+v", pm.ObjectMeta, ep)
	}
	if _, err := Render(helm, chartDir, "--set", "podMonitor.enabled=true", "--set", "serviceMonitor.enabled=true"); err == nil {
		t.Error("a PodMonitor and a ServiceMonitor together are rendered")
	}
}

func volumeNames(pod *corev1.PodSpec) []string {
	var out []string
	for _, v := range pod.Volumes {
		out = append(out, v.Name)
	}
	return out
}
