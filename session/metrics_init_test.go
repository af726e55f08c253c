package session

import (
	"go/ast"
	"go/parser"
	gotoken "go/token"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestEveryCloseReasonIsMadeAtStart: closeReasons (the series made at start) lists every
// CloseReason constant of reason.go, so a new reason cannot be missing from the scrape until it
// first happens.
func TestEveryCloseReasonIsMadeAtStart(t *testing.T) {
	f, err := parser.ParseFile(gotoken.NewFileSet(), "reason.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var declared []CloseReason
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != gotoken.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "CloseReason" {
				continue
			}
			for _, v := range vs.Values {
				s, err := strconv.Unquote(v.(*ast.BasicLit).Value)
				if err != nil {
					t.Fatal(err)
				}
				declared = append(declared, CloseReason(s))
			}
		}
	}
	if len(declared) == 0 {
		t.Fatal("no CloseReason constants found in reason.go")
	}
	for _, r := range declared {
		if !slices.Contains(closeReasons, r) {
			t.Errorf("CloseReason %q is not in closeReasons", r)
		}
	}
	if len(closeReasons) != len(declared) {
		t.Errorf("closeReasons has %d entries, reason.go declares %d", len(closeReasons), len(declared))
	}
}

// TestKnownSeriesExistAtStart: a fresh registry already exports the series of known label
// values, at 0 (promtest.Value would read 0 for a missing series too, so this gathers).
func TestKnownSeriesExistAtStart(t *testing.T) {
	reg := prometheus.NewRegistry()
	NewMetrics(reg)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	has := map[string]bool{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			key := f.GetName()
			for _, l := range m.GetLabel() {
				key += "," + l.GetName() + "=" + l.GetValue()
			}
			has[key] = true
		}
	}
	for _, want := range []string{
		"pulsar_proxy_sessions_active,mode=direct",
		"pulsar_proxy_sessions_total,mode=lookup",
		"pulsar_proxy_bytes_total,direction=" + toBroker,
		"pulsar_proxy_frames_total,direction=" + toClient,
		"pulsar_proxy_handshake_failures_total,reason=" + string(ReasonAuthFailed),
		"pulsar_proxy_session_closes_total,reason=" + string(ReasonDrained),
		"pulsar_proxy_lookups_total,result=error,type=LOOKUP",
	} {
		if !has[want] {
			t.Errorf("no series %s at start", want)
		}
	}
	if has["pulsar_proxy_handshake_failures_total,reason="+string(ReasonClientClosed)] {
		t.Error("handshake_failures_total has a series for client_closed, which is not a handshake failure")
	}
}

// TestEveryFamilyHasSeriesAtStart: every family the session layer registers has a series at
// start, the broker-labelled one once its broker joined the live set (Metrics.Broker).
func TestEveryFamilyHasSeriesAtStart(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	m.Broker("b0:6650")
	ch := make(chan *prometheus.Desc, 64)
	go func() { reg.Describe(ch); close(ch) }()
	var names []string
	for d := range ch {
		name, _, _ := strings.Cut(strings.TrimPrefix(d.String(), `Desc{fqName: "`), `"`)
		names = append(names, name)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	has := map[string]bool{}
	for _, f := range families {
		has[f.GetName()] = len(f.GetMetric()) > 0
	}
	for _, n := range names {
		if !has[n] {
			t.Errorf("%s has no series at start", n)
		}
	}
	if len(names) < 15 {
		t.Errorf("only %d families read from the registry: %v", len(names), names)
	}
}
