// Package chartcheck renders the pulsar-proxy chart (helm/pulsar-proxy) with the pinned helm
// and decodes every object it renders strictly, as a Kubernetes API server with strict field
// validation would: into the API types of k8s.io/api (the Kubernetes release its version
// names), the Prometheus operator's monitoring.coreos.com/v1 types, and cert-manager's
// Certificate (mirrored in certmanager.go). A field the type does not have — a misspelt or
// mis-cased key in a template or a value — a key given twice, or a value of the wrong type
// fails the decode, naming the template. Check then follows the references between the
// objects (selectors, port names, volumes, the HPA's target) that a type alone cannot.
//
// It is a module of its own (tools/chartcheck), so that k8s.io/api stays out of the
// product's go.mod.
package chartcheck

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Object is one rendered object: its identity, the template it came from, and its typed
// value (a pointer to the API type, e.g. *appsv1.Deployment).
type Object struct {
	APIVersion, Kind, Name string
	Source                 string // the template, from helm's "# Source:" line
	Value                  any
}

// Rendered is everything one `helm template` rendered, in order.
type Rendered []Object

// types are the kinds the chart may render, by apiVersion and kind, each with the type it
// decodes into. A kind not named here is an error: a new template must say what it is.
var types = map[string]func() any{
	"v1/ConfigMap":                            func() any { return new(corev1.ConfigMap) },
	"v1/Service":                              func() any { return new(corev1.Service) },
	"v1/ServiceAccount":                       func() any { return new(corev1.ServiceAccount) },
	"v1/Pod":                                  func() any { return new(corev1.Pod) },
	"apps/v1/Deployment":                      func() any { return new(appsv1.Deployment) },
	"policy/v1/PodDisruptionBudget":           func() any { return new(policyv1.PodDisruptionBudget) },
	"autoscaling/v2/HorizontalPodAutoscaler":  func() any { return new(autoscalingv2.HorizontalPodAutoscaler) },
	"monitoring.coreos.com/v1/ServiceMonitor": func() any { return new(monitoringv1.ServiceMonitor) },
	"monitoring.coreos.com/v1/PodMonitor":     func() any { return new(monitoringv1.PodMonitor) },
	"monitoring.coreos.com/v1/PrometheusRule": func() any { return new(monitoringv1.PrometheusRule) },
	"cert-manager.io/v1/Certificate":          func() any { return new(Certificate) },
}

// Render runs helm template on the chart with args (e.g. -f values.yaml, --set k=v) and
// returns its output; the error carries helm's stderr.
func Render(helm, chart string, args ...string) ([]byte, error) {
	cmd := exec.Command(helm, append([]string{"template", "proxy", chart}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("helm template %q: %v\n%s", args, err, stderr.Bytes())
	}
	return out, nil
}

var (
	separator = regexp.MustCompile(`(?m)^---[ \t]*$`)
	source    = regexp.MustCompile(`(?m)^# Source: (.*)$`)
)

// Decode splits helm's output into its objects and decodes each strictly into its type.
// Every problem is reported, each naming the template.
func Decode(manifests []byte) (Rendered, error) {
	var objs Rendered
	var errs []error
	for _, doc := range separator.Split(string(manifests), -1) {
		src := ""
		if m := source.FindStringSubmatch(doc); m != nil {
			src = m[1]
		}
		obj, err := decodeOne([]byte(doc))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", src, err))
			continue
		}
		if obj == nil {
			continue // only comments
		}
		obj.Source = src
		objs = append(objs, *obj)
	}
	return objs, errors.Join(errs...)
}

// decodeOne decodes one YAML document (nil when it holds no object) as the API server's
// strict field validation does: YAML to JSON refusing duplicate keys, then JSON into the
// type case-sensitively, refusing unknown and duplicate fields.
func decodeOne(doc []byte) (*Object, error) {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, err
	}
	if bytes.Equal(bytes.TrimSpace(js), []byte("null")) {
		return nil, nil
	}
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(js, &head); err != nil {
		return nil, err
	}
	key := head.APIVersion + "/" + head.Kind
	newValue, ok := types[key]
	if !ok {
		return nil, fmt.Errorf("%s %q: a kind chartcheck does not know (add its type to chartcheck's types)", key, head.Metadata.Name)
	}
	v := newValue()
	strict, err := kjson.UnmarshalStrict(js, v, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return nil, fmt.Errorf("%s %q: %w", head.Kind, head.Metadata.Name, err)
	}
	if len(strict) > 0 {
		msgs := make([]string, len(strict))
		for i, e := range strict {
			msgs[i] = e.Error()
		}
		return nil, fmt.Errorf("%s %q: %s", head.Kind, head.Metadata.Name, strings.Join(msgs, "; "))
	}
	return &Object{APIVersion: head.APIVersion, Kind: head.Kind, Name: head.Metadata.Name, Value: v}, nil
}

// All is every rendered object of type T (e.g. *corev1.ConfigMap).
func All[T any](r Rendered) []T {
	var out []T
	for _, o := range r {
		if v, ok := o.Value.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

// One is the only rendered object of type T; ok is false when there is none, and an error
// says when there are several.
func One[T any](r Rendered) (v T, ok bool, err error) {
	all := All[T](r)
	switch len(all) {
	case 0:
		return v, false, nil
	case 1:
		return all[0], true, nil
	}
	return v, false, fmt.Errorf("%d objects of type %T, want at most one", len(all), v)
}

// Named is the rendered object of type T named name.
func Named[T interface{ GetName() string }](r Rendered, name string) (T, bool) {
	for _, v := range All[T](r) {
		if v.GetName() == name {
			return v, true
		}
	}
	var zero T
	return zero, false
}
