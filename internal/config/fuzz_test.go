package config

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzLoad: whatever a configuration file holds, Load does not panic, and what it accepts
// loads the same way again and passes validation (Load validates).
func FuzzLoad(f *testing.F) {
	if b, err := os.ReadFile("../../config.example.yaml"); err == nil {
		f.Add(b)
	}
	for _, s := range []string{"", "listen: {pulsar: ':6650'}\n", "tls: {minVersion: '1.3'}\n",
		"proxyProtocol: {enabled: true, trustedCIDRs: [10.0.0.0/8]}\n", "session:\n  maxFrameSize: -1\n",
		"discovery: {static: {brokers: ['pulsar://b:6650']}}\n", "a: [\n", "--- \n---\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := Load(path, nil)
		if err != nil {
			return
		}
		again, err := Load(path, nil)
		if err != nil || !reflect.DeepEqual(cfg, again) {
			t.Fatalf("loading an accepted file again: %v", err)
		}
	})
}
