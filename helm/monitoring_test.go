package helm_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	"gopkg.in/yaml.v3"
)

const monitoringValues = "pulsar-proxy/ci/monitoring-values.yaml"

// object is a rendered object as generic YAML.
type object map[string]any

func (o object) path(keys ...string) any {
	var v any = map[string]any(o)
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// renderAll is helm template's every object, several of a kind allowed.
func renderAll(t *testing.T, helm string, args ...string) []object {
	t.Helper()
	out, err := exec.Command(helm, append([]string{"template", "proxy", chartDir}, args...)...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("helm template %q: %v\n%s", args, err, ee.Stderr)
		}
		t.Fatal(err)
	}
	var objs []object
	dec := yaml.NewDecoder(bytes.NewReader(out))
	for {
		var m map[string]any // not object: yaml.v3 would make nested maps objects too
		if err := dec.Decode(&m); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("decode helm template output: %v", err)
		}
		if m != nil {
			objs = append(objs, object(m))
		}
	}
	return objs
}

func find(objs []object, kind, name string) object {
	for _, o := range objs {
		if o["kind"] == kind && (name == "" || o.path("metadata", "name") == name) {
			return o
		}
	}
	return nil
}

// TestMonitoringObjects: off by default; on, the dashboard's ConfigMap carries the sidecar's
// label and exactly the dashboard file, and the PrometheusRule exactly the rule file (the
// files that tools/observability and test/e2e check).
func TestMonitoringObjects(t *testing.T) {
	helm := helmBinary(t)
	if out, err := exec.Command(helm, "lint", "--strict", chartDir, "-f", monitoringValues).CombinedOutput(); err != nil {
		t.Fatalf("helm lint -f %s: %v\n%s", monitoringValues, err, out)
	}
	defaults := renderAll(t, helm)
	if find(defaults, "PrometheusRule", "") != nil || find(defaults, "ConfigMap", "proxy-pulsar-proxy-dashboard") != nil {
		t.Error("a PrometheusRule or the dashboard ConfigMap is rendered although off by default")
	}

	objs := renderAll(t, helm, "-f", monitoringValues)
	cm := find(objs, "ConfigMap", "proxy-pulsar-proxy-dashboard")
	if cm == nil {
		t.Fatal("no dashboard ConfigMap")
	}
	if cm.path("metadata", "labels", "grafana_dashboard") != "1" || cm.path("metadata", "namespace") != "monitoring" ||
		cm.path("metadata", "annotations", "grafana_folder") != "Pulsar" {
		t.Errorf("dashboard ConfigMap metadata: %v", cm["metadata"])
	}
	var shipped, want any
	if s, ok := cm.path("data", "pulsar-proxy.json").(string); !ok || json.Unmarshal([]byte(s), &shipped) != nil {
		t.Fatal("the dashboard ConfigMap holds no JSON under pulsar-proxy.json")
	}
	readJSON(t, filepath.Join(chartDir, "files", "pulsar-proxy-dashboard.json"), &want)
	if !reflect.DeepEqual(shipped, want) {
		t.Error("the dashboard ConfigMap differs from files/pulsar-proxy-dashboard.json")
	}

	rule := find(objs, "PrometheusRule", "")
	if rule == nil {
		t.Fatal("no PrometheusRule")
	}
	if rule.path("metadata", "labels", "release") != "kube-prometheus-stack" {
		t.Errorf("PrometheusRule labels: %v", rule.path("metadata", "labels"))
	}
	if !reflect.DeepEqual(rule["spec"], rulesFor(t, "proxy-pulsar-proxy")) {
		t.Error("the PrometheusRule's spec differs from files/pulsar-proxy-alerts.yaml with the ServiceMonitor's job")
	}
	// The job of the absent() rule: the PodMonitor's, or the one named.
	for job, args := range map[string][]string{
		"default/proxy-pulsar-proxy": {"--set", "serviceMonitor.enabled=false", "--set", "podMonitor.enabled=true"},
		"pulsar-proxies":             {"--set", "prometheusRule.job=pulsar-proxies"},
	} {
		rule := find(renderAll(t, helm, append([]string{"-f", monitoringValues}, args...)...), "PrometheusRule", "")
		if rule == nil || !reflect.DeepEqual(rule["spec"], rulesFor(t, job)) {
			t.Errorf("%v: the PrometheusRule does not miss the job %q", args, job)
		}
	}
}

// rulesFor is files/pulsar-proxy-alerts.yaml with PulsarProxyTargetMissing's job set to job.
func rulesFor(t *testing.T, job string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir, "files", "pulsar-proxy-alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	const placeholder = `up{job="pulsar-proxy"}`
	if !bytes.Contains(b, []byte(placeholder)) {
		t.Fatalf("the rule file has no %s for the chart to replace", placeholder)
	}
	var rules map[string]any
	if err := yaml.Unmarshal(bytes.ReplaceAll(b, []byte(placeholder), []byte(`up{job="`+job+`"}`)), &rules); err != nil {
		t.Fatal(err)
	}
	return rules
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestCheckConfigHook: `helm test` runs check-config --connect on the release's config.yaml
// with the very volumes the proxy's pods mount and after their init containers (by default
// and with every ci/*.yaml: TLS, tokens, a policy, extra volumes).
func TestCheckConfigHook(t *testing.T) {
	helm := helmBinary(t)
	variants := [][]string{nil}
	for _, f := range ciValues(t) {
		variants = append(variants, []string{"-f", f})
	}
	for _, args := range variants {
		objs := renderAll(t, helm, args...)
		pod := find(objs, "Pod", "proxy-pulsar-proxy-check-config")
		if pod == nil {
			t.Fatalf("%q: no check-config test Pod", args)
		}
		if pod.path("metadata", "annotations", "helm.sh/hook") != "test" {
			t.Errorf("%q: the Pod is not a helm test hook: %v", args, pod.path("metadata", "annotations"))
		}
		c := pod.path("spec", "containers").([]any)[0].(map[string]any)
		if !reflect.DeepEqual(c["args"], []any{"check-config", "--connect", "/etc/pulsar-proxy/config.yaml"}) {
			t.Errorf("%q: args %v", args, c["args"])
		}
		deploy := find(objs, "Deployment", "")
		dc := deploy.path("spec", "template", "spec", "containers").([]any)[0].(map[string]any)
		if !reflect.DeepEqual(c["volumeMounts"], dc["volumeMounts"]) || !reflect.DeepEqual(pod.path("spec", "volumes"), deploy.path("spec", "template", "spec", "volumes")) {
			t.Errorf("%q: the test Pod's volumes differ from the Deployment's:\n%v\n%v", args, c["volumeMounts"], dc["volumeMounts"])
		}
		if c["image"] != dc["image"] {
			t.Errorf("%q: image %v, the Deployment's %v", args, c["image"], dc["image"])
		}
		// The init containers too (they may write files the proxy reads).
		if !reflect.DeepEqual(pod.path("spec", "initContainers"), deploy.path("spec", "template", "spec", "initContainers")) {
			t.Errorf("%q: the test Pod's init containers differ from the Deployment's", args)
		}
	}
	if find(renderAll(t, helm, "--set", "checkConfigTest.enabled=false"), "Pod", "") != nil {
		t.Error("checkConfigTest.enabled=false still renders the test Pod")
	}
}
