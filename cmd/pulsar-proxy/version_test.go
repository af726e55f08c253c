package main

import (
	"runtime/debug"
	"testing"
)

func TestPickVersion(t *testing.T) {
	mod := func(v string) *debug.BuildInfo { return &debug.BuildInfo{Main: debug.Module{Version: v}} }
	for _, c := range []struct {
		name    string
		stamped string
		info    *debug.BuildInfo
		ok      bool
		want    string
	}{
		{"stamped by a release build", "v1.2.0", mod("(devel)"), true, "v1.2.0"},
		{"stamp wins over the module version", "v1.2.0-3-gabcdef0", mod("v1.2.0"), true, "v1.2.0-3-gabcdef0"},
		{"go install module@v1.2.0", "", mod("v1.2.0"), true, "v1.2.0"},
		{"go build in a checkout with VCS stamping", "", mod("v0.0.0-20261201000000-0123456789ab+dirty"), true, "v0.0.0-20261201000000-0123456789ab+dirty"},
		{"go build without VCS information", "", mod("(devel)"), true, "dev"},
		{"no build information", "", nil, false, "dev"},
	} {
		if got := pickVersion(c.stamped, c.info, c.ok); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
