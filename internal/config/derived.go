package config

// Values that follow from settings, computed here so that the wiring in cmd/ holds no
// arithmetic of its own.

// maxMessagePadding is what Pulsar clients reserve in a frame for the command and the
// metadata around a message.
const maxMessagePadding = 10 << 10

// MaxMessageSize is what clients are told they may send (CONNECTED.max_message_size): the
// frame limit less the 10 KiB that clients reserve around a message, or half the frame limit
// when that is the smaller.
func (s Session) MaxMessageSize() int32 {
	if s.MaxFrameSize > 2*maxMessagePadding {
		return int32(s.MaxFrameSize - maxMessagePadding)
	}
	return int32(s.MaxFrameSize / 2)
}

// ProxyHeaderVersion is broker.proxyProtocol as the PROXY protocol version to send to
// brokers: 1, 2, or 0 for off.
func (b Broker) ProxyHeaderVersion() byte { return headerVersion(b.ProxyProtocol) }

// ProxyHeaderVersion is sni.proxyProtocol as a PROXY protocol version: 1, 2, or 0 for off.
func (s SNI) ProxyHeaderVersion() byte { return headerVersion(s.ProxyProtocol) }

func headerVersion(setting string) byte {
	switch setting {
	case "v1":
		return 1
	case "v2":
		return 2
	}
	return 0
}
