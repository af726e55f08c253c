package frame

// IsTLSRecord reports whether b starts as a TLS handshake record does (content type 22, then
// a record version 3.x: SSL 3.0 to TLS 1.3's 3.1 legacy), which is how every TLS client's
// first bytes, its ClientHello, begin. No Pulsar frame starts so: read as a frame's
// totalSize, 0x1603.... is over 369 MB, beyond any frame limit. Three bytes decide.
func IsTLSRecord(b []byte) bool {
	return len(b) >= 3 && b[0] == 0x16 && b[1] == 0x03 && b[2] <= 0x04
}
