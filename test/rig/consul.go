package rig

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// ConsulService is a service to register with the rig's Consul agent.
type ConsulService struct {
	Name    string
	ID      string // defaults to Name
	Address string
	Port    int
	Tags    []string
	Meta    map[string]string
	// Exactly one check, or none: TTL > 0 adds a TTL check that starts passing (keep it alive
	// with PassTTL); TCPInterval > 0 adds a TCP check of Address:Port at that interval;
	// HTTPCheck adds an HTTP GET check of that URL every HTTPInterval (default 1s).
	TTL          time.Duration
	TCPInterval  time.Duration
	HTTPCheck    string
	HTTPInterval time.Duration
	// DeregisterAfter, when set, lets Consul drop the service after its check is critical this long.
	DeregisterAfter time.Duration
}

// RegisterService registers svc with the agent (PUT /v1/agent/service/register).
func (r *Rig) RegisterService(ctx context.Context, svc ConsulService) error {
	if svc.ID == "" {
		svc.ID = svc.Name
	}
	body := map[string]any{
		"Name":    svc.Name,
		"ID":      svc.ID,
		"Address": svc.Address,
		"Port":    svc.Port,
	}
	if len(svc.Tags) > 0 {
		body["Tags"] = svc.Tags
	}
	if len(svc.Meta) > 0 {
		body["Meta"] = svc.Meta
	}
	check := map[string]any{}
	checks := 0
	for _, set := range []bool{svc.TTL > 0, svc.TCPInterval > 0, svc.HTTPCheck != ""} {
		if set {
			checks++
		}
	}
	switch {
	case checks > 1:
		return fmt.Errorf("rig: service %s: set one of TTL, TCPInterval and HTTPCheck", svc.ID)
	case svc.HTTPCheck != "":
		check["HTTP"] = svc.HTTPCheck
		check["Interval"] = cmp.Or(svc.HTTPInterval, time.Second).String()
		check["Timeout"] = "2s"
	case svc.TTL > 0:
		check["TTL"] = svc.TTL.String()
		check["Status"] = "passing"
	case svc.TCPInterval > 0:
		check["TCP"] = fmt.Sprintf("%s:%d", svc.Address, svc.Port)
		check["Interval"] = svc.TCPInterval.String()
		check["Timeout"] = "2s"
	}
	if len(check) > 0 {
		check["CheckID"] = "service:" + svc.ID
		if svc.DeregisterAfter > 0 {
			check["DeregisterCriticalServiceAfter"] = svc.DeregisterAfter.String()
		}
		body["Check"] = check
	}
	return r.doURL(ctx, http.MethodPut, r.ConsulHTTP+"/v1/agent/service/register", body, nil)
}

// DeregisterService removes a service by id.
func (r *Rig) DeregisterService(ctx context.Context, id string) error {
	return r.doURL(ctx, http.MethodPut, r.ConsulHTTP+"/v1/agent/service/deregister/"+url.PathEscape(id), []byte{}, nil)
}

// SetTTLCheck sets the TTL check of a service registered with a TTL: status is "passing",
// "warning" or "critical".
func (r *Rig) SetTTLCheck(ctx context.Context, serviceID, status, note string) error {
	body := map[string]string{"Status": status, "Output": note}
	return r.doURL(ctx, http.MethodPut, r.ConsulHTTP+"/v1/agent/check/update/service:"+url.PathEscape(serviceID), body, nil)
}

// ConsulServiceEntry is one instance in the answer of /v1/health/service/<name>.
type ConsulServiceEntry struct {
	Node struct {
		Node    string `json:"Node"`
		Address string `json:"Address"`
	} `json:"Node"`
	Service struct {
		ID      string            `json:"ID"`
		Service string            `json:"Service"`
		Address string            `json:"Address"`
		Port    int               `json:"Port"`
		Tags    []string          `json:"Tags"`
		Meta    map[string]string `json:"Meta"`
	} `json:"Service"`
	Checks []struct {
		CheckID string `json:"CheckID"`
		Status  string `json:"Status"`
		Output  string `json:"Output"`
	} `json:"Checks"`
}

// HealthService returns the instances of a service (GET /v1/health/service/<name>), only the
// passing ones when passingOnly is set.
func (r *Rig) HealthService(ctx context.Context, name string, passingOnly bool) ([]ConsulServiceEntry, error) {
	u := r.ConsulHTTP + "/v1/health/service/" + url.PathEscape(name)
	if passingOnly {
		u += "?passing=true"
	}
	var out []ConsulServiceEntry
	err := r.doURL(ctx, http.MethodGet, u, nil, &out)
	return out, err
}

// ConsulLeader returns the answer of /v1/status/leader (the raft leader's address).
func (r *Rig) ConsulLeader(ctx context.Context) (string, error) {
	var leader string
	if err := r.doURL(ctx, http.MethodGet, r.ConsulHTTP+"/v1/status/leader", nil, &leader); err != nil {
		return "", err
	}
	if strings.TrimSpace(leader) == "" {
		return "", fmt.Errorf("rig: consul at %s has no leader", r.ConsulHTTP)
	}
	return leader, nil
}
