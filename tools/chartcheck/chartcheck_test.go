package chartcheck

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// The chart, from this module's directory.
var chartDir = filepath.Join("..", "..", "helm", "pulsar-proxy")

// helmBinary is the pinned helm that test/rig/build-helm.sh builds into the cache (`make
// helm`: RIG_CACHE, default .cache, as helm-<HELM_VERSION of test/rig/versions.env>), or
// RIG_HELM_BIN. Without it the tests skip, saying why, or fail on CI (as the product's chart
// tests in helm/ do).
func helmBinary(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("RIG_HELM_BIN")
	if bin == "" {
		pins, err := os.ReadFile(filepath.Join("..", "..", "test", "rig", "versions.env"))
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
			cache = filepath.Join("..", "..", ".cache")
		}
		bin = filepath.Join(cache, "helm-"+version)
	}
	if _, err := os.Stat(bin); err != nil {
		if ci := os.Getenv("CI"); ci != "" && ci != "false" && ci != "0" {
			t.Fatalf("helm could not be prepared: %v (on CI nothing may be skipped)", err)
		}
		t.Skipf("helm (`make helm` builds it: test/rig/build-helm.sh): %v", err)
	}
	return bin
}

// variant is one way of rendering the chart.
type variant struct {
	name string
	args []string
}

// variants are every rendering the chart's tests make: the defaults, each ci/*.yaml (TLS and
// authentication, JWKS, monitoring, TLS-only with cert-manager and a PodMonitor, the
// operator's extras), the --set variants of the product's tests in helm/, and each new
// feature on and off.
func variants(t *testing.T) []variant {
	t.Helper()
	vs := []variant{{name: "defaults"}}
	files, err := filepath.Glob(filepath.Join(chartDir, "ci", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no ci/*.yaml: %v", err)
	}
	for _, f := range files {
		vs = append(vs, variant{"ci/" + filepath.Base(f), []string{"-f", f}})
	}
	for _, v := range []variant{
		// The product's tests' --set variants (helm/chart_test.go, helm/monitoring_test.go).
		{"sysctls", []string{"--set", "sysctls[0].name=net.ipv4.ip_local_port_range", "--set-string", "sysctls[0].value=1024 65535"}},
		{"log level", []string{"--set", "config.log.level=debug"}},
		{"no check-config test", []string{"--set", "checkConfigTest.enabled=false"}},
		// The features, the other way round from their defaults or their ci file.
		{"tls with a Secret", []string{"--set", "tls.enabled=true", "--set", "tls.secretName=proxy-tls"}},
		{"tls-only with a Secret", []string{"--set", "tls.enabled=true", "--set", "tls.secretName=proxy-tls", "--set", "config.listen.pulsar="}},
		{"NodePort", []string{"--set", "service.type=NodePort", "--set", "service.nodePorts.pulsar=30650", "--set", "service.externalTrafficPolicy=Local"}},
		{"LoadBalancer fields on a ClusterIP Service", []string{"--set", "service.loadBalancerIP=192.0.2.1", "--set", "service.loadBalancerClass=x", "--set", "service.nodePorts.pulsar=30650"}},
		{"no startup probe", []string{"--set", "probe.startup.enabled=false", "--set", "probe.liveness.initialDelaySeconds=30"}},
		{"no liveness or readiness probe", []string{"--set", "probe.liveness.enabled=false", "--set", "probe.readiness.enabled=false"}},
		{"hard anti-affinity", []string{"--set", "podAntiAffinity.type=hard"}},
		{"no anti-affinity, no spread", []string{"--set", "podAntiAffinity.type=none", "--set", "topologySpread.enabled=false"}},
		{"own affinity", []string{"--set-json", `affinity={"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"pool","operator":"In","values":["pulsar"]}]}]}}}`}},
		{"HPA with defaults", []string{"--set", "autoscaling.enabled=true"}},
		{"HPA on a custom metric alone", []string{"--set", "autoscaling.enabled=true", "--set", "autoscaling.targetCPUUtilizationPercentage=0", "--set", "autoscaling.behavior=null",
			"--set-json", `autoscaling.metrics=[{"type":"Pods","pods":{"metric":{"name":"pulsar_proxy_sessions_active"},"target":{"type":"AverageValue","averageValue":"5000"}}}]`}},
		{"ServiceMonitor tuned", []string{"--set", "serviceMonitor.enabled=true", "--set", "serviceMonitor.scrapeTimeout=10s",
			"--set-json", `serviceMonitor.metricRelabelings=[{"sourceLabels":["__name__"],"regex":".*_created$","action":"drop"}]`}},
		{"PodMonitor", []string{"--set", "podMonitor.enabled=true"}},
		{"cert-manager with RSA", []string{"--set", "tls.certManager.enabled=true", "--set", "tls.certManager.issuerRef.name=ca",
			"--set", "tls.certManager.privateKey.algorithm=RSA", "--set", "tls.certManager.privateKey.size=2048", "--set", "config.tls.clientAuth=require"}},
	} {
		vs = append(vs, v)
	}
	return vs
}

// render renders the chart with args, decodes every object strictly and checks the
// references between them; any problem fails the test.
func render(t *testing.T, helm string, args ...string) Rendered {
	t.Helper()
	out, err := Render(helm, chartDir, args...)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Decode(out)
	if err != nil {
		t.Fatalf("helm template %q: strict decoding:\n%v", args, err)
	}
	if err := Check(r); err != nil {
		t.Fatalf("helm template %q:\n%v", args, err)
	}
	return r
}

// TestEveryVariantDecodesStrictly: every variant renders objects that decode strictly into
// their API types and refer to each other correctly, with the objects every rendering has.
func TestEveryVariantDecodesStrictly(t *testing.T) {
	helm := helmBinary(t)
	for _, v := range variants(t) {
		t.Run(v.name, func(t *testing.T) {
			r := render(t, helm, v.args...)
			kinds := map[string]int{}
			for _, o := range r {
				kinds[o.Kind]++
			}
			for _, k := range []string{"Deployment", "Service", "ConfigMap", "ServiceAccount", "PodDisruptionBudget"} {
				if kinds[k] == 0 {
					t.Errorf("no %s rendered (%v)", k, kinds)
				}
			}
			if (kinds["Pod"] == 0) != slices.Contains(v.args, "checkConfigTest.enabled=false") {
				t.Errorf("check-config test Pod: %d rendered", kinds["Pod"])
			}
		})
	}
}

// proxyConfig is the rendered config.yaml of the proxy's ConfigMap, as generic YAML.
func proxyConfig(t *testing.T, r Rendered) map[string]any {
	t.Helper()
	cm, ok := Named[*corev1.ConfigMap](r, "proxy-pulsar-proxy")
	if !ok {
		t.Fatal("no ConfigMap proxy-pulsar-proxy")
	}
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(cm.Data["config.yaml"]), &cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// dig is the value at the key path of a generic YAML map (nil when absent).
func dig(m map[string]any, keys ...string) any {
	var v any = m
	for _, k := range keys {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[k]
	}
	return v
}

// copyChart copies the chart into a temporary directory, with edit applied to one file's
// text (which must change it).
func copyChart(t *testing.T, file, from, to string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "pulsar-proxy")
	err := filepath.WalkDir(chartDir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(chartDir, path)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if rel == filepath.FromSlash(file) {
			edited := strings.ReplaceAll(string(b), from, to)
			if edited == string(b) {
				t.Fatalf("%s has no %q to misspell", file, from)
			}
			b = []byte(edited)
		}
		return os.WriteFile(target, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestMisspeltFieldsAreRefused: the tests must fail on what a cluster would refuse or drop.
// Each case misspells one field of a template (or passes a wrong value) and renders the
// variant that reaches it: strict decoding refuses the unknown field (case matters, as in
// the API server), the wrong type, or Check the broken reference. The product's chart
// tests in helm/, which read a few fields, pass every one of these.
func TestMisspeltFieldsAreRefused(t *testing.T) {
	helm := helmBinary(t)
	ci := func(name string) []string { return []string{"-f", filepath.Join("ci", name)} }
	for _, c := range []struct {
		name, file, from, to string
		args                 []string
		want                 string
	}{
		{"probe timing", "templates/_helpers.tpl", "periodSeconds: {{", "periodSecond: {{", nil, `unknown field "spec.template.spec.containers[0].startupProbe.periodSecond"`},
		{"case of a container field", "templates/deployment.yaml", "containerPort: {{ include \"pulsar-proxy.pulsarPort\"", "containerport: {{ include \"pulsar-proxy.pulsarPort\"", nil, `unknown field "spec.template.spec.containers[0].ports[0].containerport"`},
		{"load balancer class", "templates/service.yaml", "loadBalancerClass: {{", "loadBalancerClas: {{", ci("operator-values.yaml"), `unknown field "spec.loadBalancerClas"`},
		{"Certificate field", "templates/certificate.yaml", "renewBefore: {{", "renewBfore: {{", ci("tls-only-values.yaml"), `unknown field "spec.renewBfore"`},
		{"PodMonitor field", "templates/podmonitor.yaml", "podMetricsEndpoints:", "podMetricEndpoints:", ci("tls-only-values.yaml"), `unknown field "spec.podMetricEndpoints"`},
		{"HPA target", "templates/hpa.yaml", "averageUtilization: {{", "averageUtilisation: {{", ci("operator-values.yaml"), `unknown field "spec.metrics[0].resource.target.averageUtilisation"`},
		{"extra volume's mount", "", "", "", []string{"--set-json", `extraVolumeMounts=[{"name":"tmp","mountpath":"/x"}]`}, `unknown field "spec.template.spec.containers[0].volumeMounts[2].mountpath"`},
		{"probe timing's type", "", "", "", []string{"--set", "probe.liveness.periodSeconds=ten"}, "periodSeconds"},
		{"probe on a port the container lacks", "templates/_helpers.tpl", "  port: http\n{{- with $p.initialDelaySeconds }}", "  port: htp\n{{- with $p.initialDelaySeconds }}", nil, `probe on port "htp", which it does not name`},
		{"Service target port", "templates/service.yaml", "targetPort: http\n", "targetPort: htttp\n", nil, `targets "htttp", which no container of the Deployment names`},
	} {
		t.Run(c.name, func(t *testing.T) {
			chart := chartDir
			if c.file != "" {
				chart = copyChart(t, c.file, c.from, c.to)
			}
			args := c.args
			if len(args) > 1 && args[0] == "-f" && !filepath.IsAbs(args[1]) {
				args = []string{"-f", filepath.Join(chartDir, args[1])}
			}
			out, err := Render(helm, chart, args...)
			if err != nil {
				t.Fatal(err)
			}
			r, err := Decode(out)
			if err == nil {
				err = Check(r)
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v\nwant an error with %s", err, c.want)
			}
		})
	}
}
