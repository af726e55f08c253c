package config

import "testing"

func TestMaxMessageSize(t *testing.T) {
	for frame, want := range map[int]int32{
		defaults().Session.MaxFrameSize: 5 << 20, // the broker's default maxMessageSize
		1 << 20:                         1<<20 - 10<<10,
		20 << 10:                        10 << 10, // no room for the padding: half
		1 << 10:                         512,
	} {
		if got := (Session{MaxFrameSize: frame}).MaxMessageSize(); got != want {
			t.Errorf("maxFrameSize %d: MaxMessageSize %d, want %d", frame, got, want)
		}
	}
}

func TestProxyHeaderVersion(t *testing.T) {
	for setting, want := range map[string]byte{"off": 0, "v1": 1, "v2": 2} {
		if got := (Broker{ProxyProtocol: setting}).ProxyHeaderVersion(); got != want {
			t.Errorf("%s: %d, want %d", setting, got, want)
		}
	}
}
