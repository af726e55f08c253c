package authn

import (
	"os"
	"path/filepath"
	"testing"
)

func TestTokenCredentials(t *testing.T) {
	method, data, err := TokenCredentials("abc", "")()
	if err != nil || method != methodToken || string(data) != "abc" {
		t.Fatalf("token: %q %q %v", method, data, err)
	}

	file := filepath.Join(t.TempDir(), "token")
	creds := TokenCredentials("", file)
	if _, _, err := creds(); err == nil {
		t.Fatal("a missing token file gave no error")
	}
	for _, tc := range []struct{ content, want string }{{"first\n", "first"}, {"  rotated \n", "rotated"}} {
		if err := os.WriteFile(file, []byte(tc.content), 0o600); err != nil {
			t.Fatal(err)
		}
		method, data, err := creds()
		if err != nil || method != methodToken || string(data) != tc.want {
			t.Fatalf("file %q: %q %q %v", tc.content, method, data, err)
		}
	}
}
