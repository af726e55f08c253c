package authn

import (
	"fmt"
	"os"
	"strings"
)

// TokenCredentials are the proxy's own credentials for its CONNECTs to brokers (method
// "token"): token as given, or, when tokenFile is set, the file's content without surrounding
// white space, read on every call so that a rotated token (a renewed Secret) is sent from the
// next connection on.
func TokenCredentials(token, tokenFile string) func() (method string, data []byte, err error) {
	return func() (string, []byte, error) {
		if tokenFile == "" {
			return methodToken, []byte(token), nil
		}
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return "", nil, fmt.Errorf("proxy's broker token: %w", err)
		}
		return methodToken, []byte(strings.TrimSpace(string(b))), nil
	}
}
