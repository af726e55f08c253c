package chartcheck

import (
	"errors"
	"fmt"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Check follows what the rendered objects say of each other and what the API server would
// refuse beyond the types: names and labels that are valid, one Deployment whose selector
// matches its pods, container and port names valid and unique, every volume mount and
// probe port naming something that exists, a Service, PodDisruptionBudget, ServiceMonitor
// and PodMonitor that select the proxy's pods or Service and name ports they have, an HPA
// that scales the Deployment, and a Certificate whose Secret the pods mount.
func Check(r Rendered) error {
	var errs []error
	bad := func(o string, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", o, fmt.Sprintf(format, args...)))
	}
	for _, o := range r {
		meta, ok := o.Value.(metav1.Object)
		if !ok {
			bad(o.Kind, "no object metadata")
			continue
		}
		id := o.Kind + " " + o.Name
		nameErrs := validation.IsDNS1123Subdomain(o.Name)
		if o.Kind == "Service" {
			nameErrs = validation.IsDNS1035Label(o.Name)
		}
		for _, e := range nameErrs {
			bad(id, "name: %s", e)
		}
		for k, v := range meta.GetLabels() {
			for _, e := range append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...) {
				bad(id, "label %s=%q: %s", k, v, e)
			}
		}
		for k := range meta.GetAnnotations() {
			for _, e := range validation.IsQualifiedName(k) {
				bad(id, "annotation %s: %s", k, e)
			}
		}
	}

	deploy, ok, err := One[*appsv1.Deployment](r)
	if err != nil || !ok {
		return errors.Join(append(errs, fmt.Errorf("want one Deployment: %v", err))...)
	}
	did := "Deployment " + deploy.Name
	podLabels := labels.Set(deploy.Spec.Template.Labels)
	if !selects(deploy.Spec.Selector, podLabels) {
		bad(did, "selector %v does not match its pod template's labels %v", deploy.Spec.Selector, podLabels)
	}
	errs = append(errs, checkPod(did, &deploy.Spec.Template.Spec)...)
	for _, p := range All[*corev1.Pod](r) {
		errs = append(errs, checkPod("Pod "+p.Name, &p.Spec)...)
	}
	containerPorts := map[string]bool{}
	for _, c := range deploy.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			containerPorts[p.Name] = true
		}
	}

	svc, ok, err := One[*corev1.Service](r)
	if err != nil || !ok {
		errs = append(errs, fmt.Errorf("want one Service: %v", err))
	} else {
		sid := "Service " + svc.Name
		if !labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) || len(svc.Spec.Selector) == 0 {
			bad(sid, "selector %v does not select the Deployment's pods", svc.Spec.Selector)
		}
		external := svc.Spec.Type == corev1.ServiceTypeNodePort || svc.Spec.Type == corev1.ServiceTypeLoadBalancer
		seen := map[string]bool{}
		for _, p := range svc.Spec.Ports {
			for _, e := range validation.IsValidPortName(p.Name) {
				bad(sid, "port name %q: %s", p.Name, e)
			}
			if seen[p.Name] {
				bad(sid, "port name %q twice", p.Name)
			}
			seen[p.Name] = true
			if p.TargetPort.Type == intstr.String && !containerPorts[p.TargetPort.StrVal] {
				bad(sid, "port %s targets %q, which no container of the Deployment names", p.Name, p.TargetPort.StrVal)
			}
			if p.NodePort != 0 && (!external || p.NodePort < 30000 || p.NodePort > 32767) {
				bad(sid, "port %s: nodePort %d on a %s Service (the default node port range is 30000-32767)", p.Name, p.NodePort, svc.Spec.Type)
			}
		}
		if !external && svc.Spec.ExternalTrafficPolicy != "" {
			bad(sid, "externalTrafficPolicy on a %s Service", svc.Spec.Type)
		}
		if svc.Spec.Type != corev1.ServiceTypeLoadBalancer && (svc.Spec.LoadBalancerIP != "" || svc.Spec.LoadBalancerClass != nil || len(svc.Spec.LoadBalancerSourceRanges) > 0) {
			bad(sid, "load balancer fields on a %s Service", svc.Spec.Type)
		}
		for _, sm := range All[*monitoringv1.ServiceMonitor](r) {
			id := "ServiceMonitor " + sm.Name
			if !selects(&sm.Spec.Selector, labels.Set(svc.Labels)) {
				bad(id, "selector does not select Service %s", svc.Name)
			}
			for _, ep := range sm.Spec.Endpoints {
				if !seen[ep.Port] {
					bad(id, "endpoint port %q is not a port name of Service %s", ep.Port, svc.Name)
				}
			}
		}
	}
	for _, pm := range All[*monitoringv1.PodMonitor](r) {
		id := "PodMonitor " + pm.Name
		if !selects(&pm.Spec.Selector, podLabels) {
			bad(id, "selector does not select the Deployment's pods")
		}
		for _, ep := range pm.Spec.PodMetricsEndpoints {
			if ep.Port == nil || !containerPorts[*ep.Port] {
				bad(id, "endpoint port %v is not a container port name of the Deployment", ep.Port)
			}
		}
	}
	for _, pdb := range All[*policyv1.PodDisruptionBudget](r) {
		if !selects(pdb.Spec.Selector, podLabels) {
			bad("PodDisruptionBudget "+pdb.Name, "selector does not select the Deployment's pods")
		}
	}
	for _, hpa := range All[*autoscalingv2.HorizontalPodAutoscaler](r) {
		ref := hpa.Spec.ScaleTargetRef
		if ref.APIVersion != "apps/v1" || ref.Kind != "Deployment" || ref.Name != deploy.Name {
			bad("HorizontalPodAutoscaler "+hpa.Name, "scales %s %s %s, not the Deployment %s", ref.APIVersion, ref.Kind, ref.Name, deploy.Name)
		}
		if hpa.Spec.MinReplicas != nil && *hpa.Spec.MinReplicas > hpa.Spec.MaxReplicas {
			bad("HorizontalPodAutoscaler "+hpa.Name, "minReplicas %d above maxReplicas %d", *hpa.Spec.MinReplicas, hpa.Spec.MaxReplicas)
		}
		if deploy.Spec.Replicas != nil {
			bad(did, "replicas %d set although HorizontalPodAutoscaler %s owns them", *deploy.Spec.Replicas, hpa.Name)
		}
	}
	for _, c := range All[*Certificate](r) {
		id := "Certificate " + c.Name
		if err := c.Validate(); err != nil {
			bad(id, "%v", err)
		}
		mounted := false
		for _, v := range deploy.Spec.Template.Spec.Volumes {
			mounted = mounted || (v.Secret != nil && v.Secret.SecretName == c.Spec.SecretName)
		}
		if !mounted {
			bad(id, "the pods mount no Secret %s", c.Spec.SecretName)
		}
	}
	return errors.Join(errs...)
}

// checkPod checks a pod spec's names and references: containers (init ones included)
// named validly and once, port names valid and once per pod, every volume mount naming a
// volume, volumes named once, and every probe's named port one of its container's.
func checkPod(id string, pod *corev1.PodSpec) []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", id, fmt.Sprintf(format, args...)))
	}
	volumes := map[string]bool{}
	for _, v := range pod.Volumes {
		for _, e := range validation.IsDNS1123Label(v.Name) {
			bad("volume %q: %s", v.Name, e)
		}
		if volumes[v.Name] {
			bad("volume %q twice", v.Name)
		}
		volumes[v.Name] = true
	}
	names := map[string]bool{}
	ports := map[string]bool{}
	all := append(append([]corev1.Container{}, pod.InitContainers...), pod.Containers...)
	if len(pod.Containers) == 0 {
		bad("no containers")
	}
	for _, c := range all {
		for _, e := range validation.IsDNS1123Label(c.Name) {
			bad("container %q: %s", c.Name, e)
		}
		if names[c.Name] {
			bad("container %q twice", c.Name)
		}
		names[c.Name] = true
		if c.Image == "" {
			bad("container %s has no image", c.Name)
		}
		own := map[string]bool{}
		for _, p := range c.Ports {
			if p.Name == "" {
				continue
			}
			for _, e := range validation.IsValidPortName(p.Name) {
				bad("container %s: port name %q: %s", c.Name, p.Name, e)
			}
			if ports[p.Name] {
				bad("port name %q twice in the pod", p.Name)
			}
			ports[p.Name], own[p.Name] = true, true
		}
		mountPaths := map[string]bool{}
		for _, m := range c.VolumeMounts {
			if !volumes[m.Name] {
				bad("container %s mounts %q, which is no volume of the pod", c.Name, m.Name)
			}
			if mountPaths[m.MountPath] {
				bad("container %s mounts two volumes at %s", c.Name, m.MountPath)
			}
			mountPaths[m.MountPath] = true
		}
		for kind, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
			if p == nil {
				continue
			}
			var port *intstr.IntOrString
			switch {
			case p.HTTPGet != nil:
				port = &p.HTTPGet.Port
			case p.TCPSocket != nil:
				port = &p.TCPSocket.Port
			}
			if port != nil && port.Type == intstr.String && !own[port.StrVal] {
				bad("container %s: %s probe on port %q, which it does not name", c.Name, kind, port.StrVal)
			}
			if (kind != "readiness") && p.SuccessThreshold > 1 {
				bad("container %s: %s probe successThreshold %d (must be 1)", c.Name, kind, p.SuccessThreshold)
			}
		}
	}
	return errs
}

// selects reports whether sel (matchLabels and matchExpressions) selects set; an empty or
// nil selector selects nothing here (the chart always names its pods).
func selects(sel *metav1.LabelSelector, set labels.Set) bool {
	if sel == nil || (len(sel.MatchLabels) == 0 && len(sel.MatchExpressions) == 0) {
		return false
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	return err == nil && s.Matches(set)
}

// ProxyContainer is the pod's pulsar-proxy container (nil when there is none).
func ProxyContainer(pod *corev1.PodSpec) *corev1.Container {
	for i, c := range pod.Containers {
		if c.Name == "pulsar-proxy" {
			return &pod.Containers[i]
		}
	}
	return nil
}

// PortNames are the names of a container's ports, or of a Service's.
func PortNames[P corev1.ContainerPort | corev1.ServicePort](ports []P) []string {
	var out []string
	for _, p := range ports {
		switch p := any(p).(type) {
		case corev1.ContainerPort:
			out = append(out, p.Name)
		case corev1.ServicePort:
			out = append(out, p.Name)
		}
	}
	return out
}
