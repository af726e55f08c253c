package wsapi

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/pulsar-proxy/pulsar-proxy/authz"
)

// Kind is the endpoint a path names.
type Kind uint8

const (
	Producer Kind = iota
	Consumer
	Reader
)

// String is the kind as the path spells it (and a metric label).
func (k Kind) String() string {
	return [...]string{"producer", "consumer", "reader"}[k]
}

// Prefix is the start of every path of the API.
const Prefix = "/ws/"

// Endpoint is a parsed request path.
type Endpoint struct {
	Kind Kind
	// Topic is the complete topic name: domain://tenant/namespace/local (v2) or
	// domain://tenant/cluster/namespace/local (v1).
	Topic string
	// Subscription is a consumer's subscription name (decoded); "" for the others.
	Subscription string
}

// ParsePath reads an escaped request path as the WebSocket service does:
//
//	/ws/v2/{producer|reader}/{persistent|non-persistent}/tenant/namespace/topic
//	/ws/v2/consumer/{persistent|non-persistent}/tenant/namespace/topic/subscription
//	/ws/{producer|consumer|reader}/{domain}/tenant/cluster/namespace/topic[/subscription]
//
// Tenant, cluster and namespace are taken as written; the topic's segments (a producer's or
// reader's may hold several, joined by '/', empty ones dropped) are decoded once as a form
// value, as Pulsar's Codec.decode does ('+' is a space). A consumer's path has exactly one
// topic segment and a non-empty subscription. Anything else is a *Refusal.
func ParsePath(escaped string) (Endpoint, error) {
	parts := strings.Split(escaped, "/")
	if len(parts) < 8 || parts[0] != "" || parts[1] != "ws" {
		return Endpoint{}, badPath(escaped, "not /ws/v2/{producer|consumer|reader}/{domain}/tenant/namespace/topic")
	}
	v2 := parts[2] == "v2"
	kindAt := 2
	if v2 {
		kindAt = 3
	}
	var e Endpoint
	switch parts[kindAt] {
	case "producer":
		e.Kind = Producer
	case "consumer":
		e.Kind = Consumer
	case "reader":
		e.Kind = Reader
	default:
		return Endpoint{}, &Refusal{Status: http.StatusNotFound, Message: "no WebSocket endpoint at " + escaped}
	}
	domain := parts[kindAt+1]
	if domain != authz.DomainPersistent && domain != authz.DomainNonPersistent {
		return Endpoint{}, badPath(escaped, "the domain is persistent or non-persistent")
	}
	nsParts := parts[5:7]
	if !v2 {
		nsParts = parts[4:7]
	}
	for _, p := range nsParts {
		if !namedEntity(p) {
			return Endpoint{}, badPath(escaped, "tenant, cluster and namespace are non-empty and only [-=:.a-zA-Z0-9_]")
		}
	}
	local, err := localName(parts, e.Kind)
	if err != nil {
		return Endpoint{}, badPath(escaped, err.Error())
	}
	e.Topic = domain + "://" + strings.Join(nsParts, "/") + "/" + local
	if e.Kind == Consumer {
		if e.Subscription, err = url.QueryUnescape(parts[8]); err != nil || e.Subscription == "" {
			return Endpoint{}, badPath(escaped, "the subscription name is empty or not escaped right")
		}
	}
	return e, nil
}

// localName joins and decodes the topic's segments: parts[7:] (a consumer: parts[7] alone,
// the subscription after it).
func localName(parts []string, k Kind) (string, error) {
	if k == Consumer {
		if len(parts) != 9 {
			return "", errString("a consumer's path is .../topic/subscription, with no '/' in the topic")
		}
		parts = parts[:8]
	}
	segs := []string{parts[7]}
	for _, s := range parts[8:] {
		if s != "" {
			segs = append(segs, s)
		}
	}
	name, err := url.QueryUnescape(strings.Join(segs, "/"))
	if err != nil || strings.TrimSpace(name) == "" {
		return "", errString("the topic name is empty or not escaped right")
	}
	return name, nil
}

// namedEntity is Pulsar's NamedEntity rule for tenants, clusters and namespaces.
func namedEntity(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c == '-' || c == '=' || c == ':' || c == '.' || c == '_' ||
			(c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
		if !ok {
			return false
		}
	}
	return true
}

type errString string

func (e errString) Error() string { return string(e) }

func badPath(path, why string) *Refusal {
	return &Refusal{Status: http.StatusBadRequest, Message: "Invalid topic name format: " + path + ": " + why}
}
