package authz

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// NamespaceName is a namespace name as the broker reads it (Pulsar 4.0.8's
// org.apache.pulsar.common.naming.NamespaceName).
type NamespaceName struct {
	Tenant    string
	Namespace string
}

// String is tenant/namespace.
func (n NamespaceName) String() string { return n.Tenant + "/" + n.Namespace }

// ParseNamespace reads name as NamespaceName.get does: Java's String.split("/"), which drops
// trailing empty parts ("a/b/" is a/b), then two parts are tenant/namespace and three a
// legacy tenant/cluster/namespace (refused here, as legacy topic names are), each a
// non-empty named entity.
func ParseNamespace(name string) (NamespaceName, error) {
	if !utf8.ValidString(name) {
		return NamespaceName{}, fmt.Errorf("%q: %w", name, errTopicNotUTF8)
	}
	parts := strings.Split(name, "/")
	for len(parts) > 0 && parts[len(parts)-1] == "" {
		parts = parts[:len(parts)-1]
	}
	switch len(parts) {
	case 2:
	case 3:
		if isNamedEntity(parts[0]) && isNamedEntity(parts[1]) && isNamedEntity(parts[2]) {
			return NamespaceName{}, fmt.Errorf("%q: legacy namespace names (tenant/cluster/namespace) are refused", name)
		}
		fallthrough
	default:
		return NamespaceName{}, fmt.Errorf("%q: %w: a namespace is <tenant>/<namespace>", name, errInvalidTopic)
	}
	if !isNamedEntity(parts[0]) || !isNamedEntity(parts[1]) {
		return NamespaceName{}, fmt.Errorf("%q: %w: tenant and namespace are non-empty and only [-=:.a-zA-Z0-9_]", name, errInvalidTopic)
	}
	return NamespaceName{Tenant: parts[0], Namespace: parts[1]}, nil
}
