package helm_test

import (
	"bytes"
	"errors"
	"io"
	"os/exec"
	"testing"

	"gopkg.in/yaml.v3"
)

// The parts of the rendered objects the tests look at (unknown fields are ignored).
type manifest struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"` // ConfigMap
	Spec struct {
		Replicas *int `yaml:"replicas"` // Deployment
		Template struct {
			Metadata struct {
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"metadata"`
			Spec podSpec `yaml:"spec"`
		} `yaml:"template"`
		Type                  string        `yaml:"type"` // Service
		ExternalTrafficPolicy string        `yaml:"externalTrafficPolicy"`
		Ports                 []servicePort `yaml:"ports"`
		Endpoints             []struct {    // ServiceMonitor
			Port string `yaml:"port"`
			Path string `yaml:"path"`
		} `yaml:"endpoints"`
		ScaleTargetRef struct { // HorizontalPodAutoscaler
			Name string `yaml:"name"`
		} `yaml:"scaleTargetRef"`
	} `yaml:"spec"`
}

type servicePort struct {
	Name       string `yaml:"name"`
	Port       int    `yaml:"port"`
	TargetPort string `yaml:"targetPort"`
}

type podSpec struct {
	TerminationGracePeriodSeconds int   `yaml:"terminationGracePeriodSeconds"`
	AutomountServiceAccountToken  *bool `yaml:"automountServiceAccountToken"`
	SecurityContext               struct {
		RunAsNonRoot bool `yaml:"runAsNonRoot"`
		RunAsUser    int  `yaml:"runAsUser"`
		Sysctls      []struct {
			Name  string `yaml:"name"`
			Value string `yaml:"value"`
		} `yaml:"sysctls"`
	} `yaml:"securityContext"`
	Containers []container `yaml:"containers"`
	Volumes    []volume    `yaml:"volumes"`
}

type container struct {
	Name  string   `yaml:"name"`
	Image string   `yaml:"image"`
	Args  []string `yaml:"args"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	StartupProbe   *probe `yaml:"startupProbe"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	Lifecycle      struct {
		PreStop struct {
			Sleep struct {
				Seconds int `yaml:"seconds"`
			} `yaml:"sleep"`
		} `yaml:"preStop"`
	} `yaml:"lifecycle"`
	SecurityContext struct {
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   bool  `yaml:"readOnlyRootFilesystem"`
		RunAsNonRoot             bool  `yaml:"runAsNonRoot"`
		Capabilities             struct {
			Drop []string `yaml:"drop"`
		} `yaml:"capabilities"`
	} `yaml:"securityContext"`
	Resources struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
}

type probe struct {
	HTTPGet struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"` // a name or a number
	} `yaml:"httpGet"`
}

type volume struct {
	Name   string `yaml:"name"`
	Secret *struct {
		SecretName string `yaml:"secretName"`
	} `yaml:"secret"`
	ConfigMap *struct {
		Name string `yaml:"name"`
	} `yaml:"configMap"`
	EmptyDir *struct {
		SizeLimit string `yaml:"sizeLimit"`
	} `yaml:"emptyDir"`
}

// rendered is the output of one `helm template`, by kind (one object of each).
type rendered map[string]manifest

// helmTemplate renders the chart with the given extra arguments (e.g. -f values.yaml).
func helmTemplate(t *testing.T, helm string, args ...string) rendered {
	t.Helper()
	out, err := exec.Command(helm, append([]string{"template", "proxy", chartDir}, args...)...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("helm template %q: %v\n%s", args, err, ee.Stderr)
		}
		t.Fatal(err)
	}
	objs := rendered{}
	dec := yaml.NewDecoder(bytes.NewReader(out))
	for {
		var m manifest
		if err := dec.Decode(&m); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("decode helm template output: %v", err)
		}
		if m.Kind == "" {
			continue
		}
		// Of two objects of a kind (the dashboard's ConfigMap beside the proxy's), the one
		// named as the release's objects.
		if had, dup := objs[m.Kind]; dup && had.Metadata.Name == m.Metadata.Name {
			t.Fatalf("two objects of kind %s named %s", m.Kind, m.Metadata.Name)
		} else if dup && m.Metadata.Name != "proxy-pulsar-proxy" {
			continue
		}
		objs[m.Kind] = m
	}
	return objs
}

func (r rendered) get(t *testing.T, kind string) manifest {
	t.Helper()
	m, ok := r[kind]
	if !ok {
		t.Fatalf("no %s rendered", kind)
	}
	return m
}

// proxy is the pod's pulsar-proxy container (sidecars may stand beside it).
func (p podSpec) proxy() container {
	for _, c := range p.Containers {
		if c.Name == "pulsar-proxy" {
			return c
		}
	}
	return container{}
}

func (c container) port(name string) int {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

func (s manifest) servicePort(name string) *servicePort {
	for i, p := range s.Spec.Ports {
		if p.Name == name {
			return &s.Spec.Ports[i]
		}
	}
	return nil
}
