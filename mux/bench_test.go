package mux

import "testing"

// BenchmarkUpSend is the mapping of one SEND as the proxy does it: the id rewritten in the
// command's bytes, the frame's head built.
func BenchmarkUpSend(b *testing.B) {
	m, c := NewMapper(), NewClient()
	acceptedProducer(b, m, c, 1)
	send := sendCmd(1, 7)
	payload := make([]byte, 1024)
	b.ReportAllocs()
	for b.Loop() {
		out, err := m.UpBytes(c, send)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := EncodeBytes(out, payload); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUpSendDecoded is the same through the decoding path, for comparison.
func BenchmarkUpSendDecoded(b *testing.B) {
	m, c := NewMapper(), NewClient()
	acceptedProducer(b, m, c, 1)
	send := sendCmd(1, 7)
	payload := make([]byte, 1024)
	b.ReportAllocs()
	for b.Loop() {
		cmd := mustDecode(send)
		if err := m.Up(c, cmd); err != nil {
			b.Fatal(err)
		}
		if _, err := Encode(cmd, payload); err != nil {
			b.Fatal(err)
		}
	}
}
