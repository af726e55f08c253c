package config

import (
	"errors"
	"fmt"
	"net"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/caarlos0/env/v11"
)

// loadEnv sets each setting whose variable is in environ (an empty value counts as unset),
// and refuses a PULSAR_PROXY_* variable that names no setting, with the nearest one that
// does: a misspelt variable would otherwise leave its setting at the default unnoticed. Each
// variable is parsed on its own, so that an error names the variable the operator set. set
// gets the path of every setting given a value.
func (c *Config) loadEnv(environ []string, set map[string]bool) error {
	vars := env.ToMap(environ)
	root := reflect.ValueOf(c).Elem()
	var errs []error
	var known []string
	walk(func(s setting) {
		if s.env == "" {
			return
		}
		known = append(known, s.env)
		value := vars[s.env]
		if value == "" {
			return
		}
		v, err := parseVar(s.field.Type, value)
		if err != nil {
			errs = append(errs, fmt.Errorf("environment: %s (%s): %s", s.env, s.path, envProblem(s.field.Type, value)))
			return
		}
		root.FieldByIndex(s.index).Set(v)
		set[s.path] = true
	})
	return errors.Join(append(errs, unknownVars(vars, known)...)...)
}

// unknownVars are the errors of the PULSAR_PROXY_* variables in vars that are not in known,
// but for the ones Kubernetes sets for a Service of a name that starts with pulsar-proxy.
func unknownVars(vars map[string]string, known []string) []error {
	var names []string
	for name, value := range vars {
		if strings.HasPrefix(name, envPrefix) && !slices.Contains(known, name) && !serviceLink(name, value) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	short := make([]string, len(known))
	for i, k := range known {
		short[i] = strings.TrimPrefix(k, envPrefix)
	}
	var errs []error
	for _, name := range names {
		guess, ok := nearest(strings.TrimPrefix(name, envPrefix), short)
		if !ok {
			guess, ok = suffixMatch(strings.TrimPrefix(name, envPrefix), short)
		}
		errs = append(errs, fmt.Errorf("environment: %s: unknown variable%s", name, didYouMean(envPrefix+guess, ok)))
	}
	return errs
}

// suffixMatch is the one known name that ends in name (a section left out:
// DNS_NAME for DISCOVERY_DNS_NAME), or that name ends in (a section too many).
func suffixMatch(name string, known []string) (string, bool) {
	var found []string
	for _, k := range known {
		if strings.HasSuffix(k, "_"+name) || strings.HasSuffix(name, "_"+k) {
			found = append(found, k)
		}
	}
	if len(found) != 1 {
		return "", false
	}
	return found[0], true
}

// serviceLink reports whether name=value is one of the variables Kubernetes gives every pod
// for each Service of its namespace (enableServiceLinks, on by default): a Service named
// pulsar-proxy (Apache's chart names its proxy so) yields PULSAR_PROXY_SERVICE_HOST,
// PULSAR_PROXY_PORT=tcp://…, PULSAR_PROXY_PORT_6650_TCP_ADDR, …. Refusing those would stop
// the proxy in any namespace that holds such a Service; each is recognised by its name and
// its value, so a misspelt setting is still caught.
func serviceLink(name, value string) bool {
	isIP := func(s string) bool { return net.ParseIP(s) != nil }
	isPort := func(s string) bool { n, err := strconv.Atoi(s); return err == nil && n > 0 && n < 65536 }
	isURL := func(s string) bool { return regexp.MustCompile(`^(tcp|udp|sctp)://[^/]+:[0-9]+$`).MatchString(s) }
	forms := []struct {
		pattern string
		value   func(string) bool
	}{
		// The longer forms first: the first pattern that matches the name decides.
		{`_PORT_[0-9]+_(TCP|UDP|SCTP)_ADDR$`, isIP},
		{`_PORT_[0-9]+_(TCP|UDP|SCTP)_PORT$`, isPort},
		{`_PORT_[0-9]+_(TCP|UDP|SCTP)_PROTO$`, func(s string) bool { return s == "tcp" || s == "udp" || s == "sctp" }},
		{`_PORT_[0-9]+_(TCP|UDP|SCTP)$`, isURL},
		{`_SERVICE_HOST$`, isIP},
		{`_SERVICE_PORT(_[A-Z0-9_]+)?$`, isPort},
		{`_PORT$`, isURL},
	}
	for _, f := range forms {
		if regexp.MustCompile(f.pattern).MatchString(name) {
			return f.value(value)
		}
	}
	return false
}

// parseVar parses one variable's value as the env library parses a field of type t.
func parseVar(t reflect.Type, value string) (reflect.Value, error) {
	one := reflect.New(reflect.StructOf([]reflect.StructField{{Name: "V", Type: t, Tag: `env:"V"`}}))
	err := env.ParseWithOptions(one.Interface(), env.Options{Environment: map[string]string{"V": value}})
	return one.Elem().Field(0), err
}

// envProblem says in plain words what is wrong with value for a setting of type t: for a
// list, which items.
func envProblem(t reflect.Type, value string) string {
	if t.Kind() == reflect.Slice {
		var bad []string
		for i, item := range strings.Split(value, ",") {
			if _, err := parseVar(t.Elem(), item); err != nil {
				bad = append(bad, fmt.Sprintf("[%d] %s", i, quoteClipped(item)))
			}
		}
		if bad != nil {
			return fmt.Sprintf("want %s, got %s", envWant(t), strings.Join(bad, ", "))
		}
	}
	return fmt.Sprintf("want %s, got %s", envWant(t), quoteClipped(value))
}
