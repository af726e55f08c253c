// Package zkaddr reads a ZooKeeper connect string as Pulsar writes it in metadataStoreUrl.
package zkaddr

import (
	"fmt"
	"strings"
)

// Address is a ZooKeeper connect string as Pulsar writes it in metadataStoreUrl:
// [zk:]host:port[,host:port...][/chroot].
type Address struct {
	Servers []string // host:port
	Chroot  string   // "" or /path
}

// Parse reads a connect string. A server without a port is on 2181.
func Parse(s string) (Address, error) {
	s = strings.TrimPrefix(s, "zk:")
	if strings.Contains(s, "://") {
		return Address{}, fmt.Errorf("%q: not a ZooKeeper connect string (want [zk:]host:port[,host:port...][/chroot])", s)
	}
	var a Address
	if i := strings.IndexByte(s, '/'); i >= 0 {
		s, a.Chroot = s[:i], s[i:]
	}
	if err := CheckChroot(a.Chroot); err != nil {
		return Address{}, err
	}
	for srv := range strings.SplitSeq(s, ",") {
		srv = strings.TrimSpace(srv)
		if srv == "" {
			return Address{}, fmt.Errorf("empty server in %q", s)
		}
		if !strings.Contains(srv, ":") || strings.HasSuffix(srv, "]") {
			srv += ":2181"
		}
		a.Servers = append(a.Servers, srv)
	}
	return a, nil
}

// CheckChroot accepts "" or an absolute path without empty, "." or ".." elements and
// without a trailing slash (ZooKeeper's own path rules, the ones that matter here).
func CheckChroot(c string) error {
	if c == "" || c == "/" {
		return nil
	}
	if !strings.HasPrefix(c, "/") || strings.HasSuffix(c, "/") {
		return fmt.Errorf("chroot %q: want an absolute path without a trailing slash, e.g. /pulsar", c)
	}
	for el := range strings.SplitSeq(c[1:], "/") {
		if el == "" || el == "." || el == ".." {
			return fmt.Errorf("chroot %q: empty, . or .. path element", c)
		}
	}
	return nil
}
