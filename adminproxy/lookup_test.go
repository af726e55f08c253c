package adminproxy

import (
	"compress/gzip"
	"encoding/json"
	"net/http"
	"testing"
)

// A broker's lookup answer, gzipped when the request allows it (as a broker's Jetty does).
func lookupBroker(t *testing.T) *broker {
	return newBroker(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "application/json")
		body := `{"brokerUrl":"pulsar://broker-2:6650","brokerUrlTls":"pulsar+ssl://broker-2:6651",` +
			`"httpUrl":"http://broker-2:8080","httpUrlTls":"https://broker-2:8443","nativeUrl":"pulsar://broker-2:6650","extra":7}`
		if r.Header.Get("Accept-Encoding") != "" {
			w.Header().Set("Content-Encoding", "gzip")
			z := gzip.NewWriter(w)
			z.Write([]byte(body))
			z.Close()
			return
		}
		w.Write([]byte(body))
	})
}

func TestHTTPLookupAnswersWithTheProxysURLs(t *testing.T) {
	brk := lookupBroker(t)
	var hosts []string
	tp := newProxy(t, Config{Brokers: static(t, brk.url()), Advertise: func(r *http.Request) Advertised {
		hosts = append(hosts, r.Host)
		return Advertised{Pulsar: "pulsar://gw:6650", PulsarTLS: "pulsar+ssl://gw:6651", HTTP: "http://gw:8080"}
	}})
	for _, path := range []string{
		"/lookup/v2/topic/persistent/public/default/t",
		"/lookup/v2/topic/non-persistent/public/default/t?authoritative=false",
		"/lookup/v2/destination/persistent/public/standalone/default/t",
	} {
		code, body, _ := tp.do(t, "GET", path, nil, "Accept-Encoding", "gzip")
		if code != 200 {
			t.Fatalf("%s: %d %s", path, code, body)
		}
		var got map[string]any
		if err := json.Unmarshal([]byte(body), &got); err != nil {
			t.Fatalf("%s: %q: %v", path, body, err)
		}
		want := map[string]any{"brokerUrl": "pulsar://gw:6650", "nativeUrl": "pulsar://gw:6650",
			"brokerUrlTls": "pulsar+ssl://gw:6651", "httpUrl": "http://gw:8080", "extra": float64(7)}
		if len(got) != len(want) {
			t.Errorf("%s: answer %v, want %v (httpUrlTls gone: that listener is off)", path, got, want)
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: %s = %v, want %v", path, k, got[k], v)
			}
		}
	}
	if len(hosts) != 3 || hosts[0] != tp.Listener.Addr().String() {
		t.Errorf("advertise saw the client's requests %v, want its Host %s each time", hosts, tp.Listener.Addr())
	}
}

func TestHTTPLookupLeavesOtherAnswers(t *testing.T) {
	brk := lookupBroker(t)
	tp := newProxy(t, Config{Brokers: static(t, brk.url()), Advertise: func(*http.Request) Advertised {
		return Advertised{Pulsar: "pulsar://gw:6650"}
	}})
	for _, path := range []string{
		"/lookup/v2/topic/persistent/public/default/t/bundle",
		"/admin/v2/persistent/public/default/t/partitions",
		"/lookup/v2/topic/persistent/public/default",
	} {
		code, body, _ := tp.do(t, "GET", path, nil)
		if code != 200 || !json.Valid([]byte(body)) {
			t.Fatalf("%s: %d %s", path, code, body)
		}
		var got map[string]any
		json.Unmarshal([]byte(body), &got)
		if got["brokerUrl"] != "pulsar://broker-2:6650" {
			t.Errorf("%s: rewritten to %v; only topic lookups are", path, got)
		}
	}
}

func TestHTTPLookupUnreadableAnswerIsNotPassedOn(t *testing.T) {
	brk := newBroker(t, func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Write([]byte(`pulsar://broker-2:6650`))
	})
	tp := newProxy(t, Config{Brokers: static(t, brk.url()), Advertise: func(*http.Request) Advertised {
		return Advertised{Pulsar: "pulsar://gw:6650"}
	}})
	code, body, _ := tp.do(t, "GET", "/lookup/v2/topic/persistent/public/default/t", nil)
	if code != http.StatusBadGateway {
		t.Errorf("unreadable lookup answer: %d %q, want 502 (it would name a broker)", code, body)
	}
}
