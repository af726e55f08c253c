//go:build linux

package main

import (
	"os"
	"strings"
	"testing"
)

// TestJavaProxyConfIsFilledIn: every ${...} of java-proxy.conf has a value in javaProxyPath
// (a placeholder left in would reach the Java proxy as a literal).
func TestJavaProxyConfIsFilledIn(t *testing.T) {
	values := map[string]bool{"clusterName": true, "brokerServiceURL": true, "brokerWebServiceURL": true, "servicePort": true, "webServicePort": true}
	os.Expand(javaProxyConf, func(k string) string {
		if !values[k] {
			t.Errorf("java-proxy.conf names ${%s}, which javaProxyPath does not fill in", k)
		}
		return ""
	})
	if !strings.Contains(javaProxyConf, "brokerServiceURL=${brokerServiceURL}") {
		t.Error("java-proxy.conf no longer names the rig's broker")
	}
}
