package brokers

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/pulsar-proxy/pulsar-proxy/internal/brokerhost"
)

// ErrAmbiguousName is returned by AllowSNI for a name that several live brokers share: a TLS
// server name carries no port, so nothing tells those brokers apart.
var ErrAmbiguousName = errors.New("several brokers share this name")

// SNIMatch is how AllowSNI matched a server name.
type SNIMatch uint8

const (
	// SNIBroker: the name is the host of one live broker's TLS endpoint.
	SNIBroker SNIMatch = iota
	// SNIService: the name is one of Options.SNIServiceNames; a broker of the set was picked.
	SNIService
)

// String is the match as a metric label.
func (m SNIMatch) String() string {
	if m == SNIService {
		return "service"
	}
	return "broker"
}

// AllowSNI is the target rule of the SNI plane (a TLS stream relayed unread to the broker its
// ClientHello names). The name, lower-cased, must be a DNS name (RFC 6066 allows no IP
// literal and no trailing dot), and then either:
//   - exactly the host of one live broker whose discovery URL is TLS (pulsar+ssl://): that
//     broker, on the port of that URL. No pattern, suffix or learned target applies: a name
//     reaches only what discovery lists now;
//   - one of Options.SNIServiceNames: a live TLS broker picked as lookups pick one (those
//     that answered their last probe first, round robin).
//
// Anything else is refused before a byte reaches a socket. Names are compared as written,
// never resolved.
func (s *Set) AllowSNI(name string) (Broker, SNIMatch, error) {
	// Checked before lowering: strings.ToLower maps some non-ASCII letters to ASCII (the
	// Kelvin sign to k), which would let a name the broker reads otherwise match a broker.
	host := strings.ToLower(name)
	if err := checkServerName(name); err != nil {
		return Broker{}, SNIBroker, fmt.Errorf("%w: server name %s: %v", ErrTargetNotAllowed, clip(name), err)
	}
	var found []Broker
	for _, b := range s.live() {
		if b.TLS && b.Host == host {
			found = append(found, b)
		}
	}
	switch {
	case len(found) == 1:
		return found[0], SNIBroker, nil
	case len(found) > 1:
		return Broker{}, SNIBroker, fmt.Errorf("%w: %s names %d brokers (%s, %s, ...), which a server name cannot tell apart", ErrAmbiguousName, host, len(found), found[0].Addr(), found[1].Addr())
	case !slices.Contains(s.opts.SNIServiceNames, host):
		return Broker{}, SNIBroker, fmt.Errorf("%w: %s is neither a live broker's TLS host nor a service name", ErrTargetNotAllowed, host)
	}
	picked, err := s.Pick()
	if err != nil {
		return Broker{}, SNIService, err
	}
	for _, b := range picked {
		if b.TLS {
			return b, SNIService, nil
		}
	}
	return Broker{}, SNIService, fmt.Errorf("%w: discovery lists no broker with a TLS URL (pulsar+ssl://)", ErrNoBroker)
}

// checkServerName accepts a TLS server name as RFC 6066 writes one: a DNS name (see
// brokerhost.CheckHost), not an IP literal.
func checkServerName(name string) error {
	if _, err := netip.ParseAddr(name); err == nil {
		return errors.New("an IP address is not a server name")
	}
	if strings.Contains(name, ":") {
		return errors.New("not a DNS name")
	}
	return brokerhost.CheckHost(name)
}
