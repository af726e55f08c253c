package metrics

import (
	"regexp"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulsar-proxy/pulsar-proxy/adminproxy"
	"github.com/pulsar-proxy/pulsar-proxy/authn"
	"github.com/pulsar-proxy/pulsar-proxy/authz"
	"github.com/pulsar-proxy/pulsar-proxy/discovery"
	"github.com/pulsar-proxy/pulsar-proxy/internal/connlimit"
	"github.com/pulsar-proxy/pulsar-proxy/internal/listener"
	"github.com/pulsar-proxy/pulsar-proxy/lookup"
	"github.com/pulsar-proxy/pulsar-proxy/mux"
	"github.com/pulsar-proxy/pulsar-proxy/session"
	"github.com/pulsar-proxy/pulsar-proxy/websocket"
)

// Defined reports whether the proxy's packages define a metric called name, and its label
// names. It reads the descriptors of the collectors that the packages' metric constructors
// register (the constructors internal/app/proxy calls), from the source tree the tested binary
// is built from. A labelled counter with no series yet exports nothing, not even its # TYPE
// line; this is how Count still tells such a counter from a misspelt or renamed one.
func Defined(name string) (labelNames []string, ok bool) {
	definedOnce.Do(func() { defined = readDefinitions() })
	labelNames, ok = defined[name]
	return labelNames, ok
}

var (
	definedOnce sync.Once
	defined     map[string][]string
)

func readDefinitions() map[string][]string {
	r := &recorder{names: map[string][]string{}}
	session.NewMetrics(r)
	discovery.NewMetrics(r)
	lookup.NewMetrics(r)
	authn.NewMetrics(r)
	authz.NewMetrics(r)
	authn.NewJWKSMetrics(r)
	listener.NewMetrics(r)
	adminproxy.NewMetrics(r)
	mux.NewMetrics(r)
	connlimit.NewBudgetMetrics(r)
	connlimit.NewListenerMetrics(r)
	websocket.NewMetrics(r)
	return r.names
}

// recorder is a prometheus.Registerer that keeps the names and variable labels of what is
// registered with it.
type recorder struct{ names map[string][]string }

// descString matches prometheus.Desc.String():
// Desc{fqName: "…", help: "…", unit: "…", constLabels: {…}, variableLabels: {a,c(b)}}.
var descString = regexp.MustCompile(`^Desc\{fqName: "([a-zA-Z_:][a-zA-Z0-9_:]*)", .*variableLabels: \{([^}]*)\}\}$`)

func (r *recorder) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		m := descString.FindStringSubmatch(d.String())
		if m == nil {
			panic("metrics: cannot read the descriptor " + d.String())
		}
		var labels []string
		for _, l := range strings.Split(m[2], ",") {
			if l = strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")"); l != "" {
				labels = append(labels, l)
			}
		}
		r.names[m[1]] = labels
	}
	return nil
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		r.Register(c)
	}
}

func (r *recorder) Unregister(prometheus.Collector) bool { return false }
