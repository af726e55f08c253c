// Package sni is the SNI plane: a listener for TLS that the proxy does not terminate
// (Pulsar's proxyServiceUrl with ProxyProtocol.SNI, PIP-60). It reads the client's
// ClientHello without answering it, takes the server name, and relays the still-encrypted
// stream to that broker's TLS port, only when the name is a live broker of brokers.Set (or a
// configured service name); anything else is refused with a TLS alert before a byte reaches a
// broker. The TLS session, the client's certificate and its authentication end at the
// broker: the proxy sees no frame, so it can apply no topic policy and name no
// original_principal (docs/sni.md).
package sni
