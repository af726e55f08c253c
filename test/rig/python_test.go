package rig

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"
)

// TestPyPayloadMatchesPyclient: the digests are of pyclient.py's payload(prefix, i), taken
// from Python, so Go and Python agree on every byte.
func TestPyPayloadMatchesPyclient(t *testing.T) {
	for _, tc := range []struct {
		i      int
		size   int
		sha256 string
	}{
		{0, 12, "9b877feeda4ff4368b003097432b72f1d06d144ff4e416328b21ce88c3b87e26"},
		{3, 15, "72f08a06fa8c1f91db2bc517b6eea344decb8cddc4dddb9997620a79ba673e74"},
		{130, 142, "e275103f90d11f9f95b2ec18468aac5eda76f176959489594c1b1a96fbee0344"},
		{699, 711, "b26a61940ad9f6bbb180ff45bae1d100af1b104ef8903cd9d0db0b5aa4a8acc0"},
		{1403, 15, "04d1319ac46ef7a8f6a6adc323db0a9e869e71c4039922865fab0e124afd5e6d"},
	} {
		p := PyPayload("py", tc.i)
		sum := sha256.Sum256(p)
		if len(p) != tc.size || hex.EncodeToString(sum[:]) != tc.sha256 {
			t.Errorf("PyPayload(py, %d) = %d bytes %x, want %d bytes %s", tc.i, len(p), sum, tc.size, tc.sha256)
		}
	}
}
