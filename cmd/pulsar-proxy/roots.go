package main

// The binary carries Mozilla's trusted roots (as Go's x/crypto maintains them) for when the
// system has none: the image is FROM scratch, and a JWKS endpoint of a public identity
// provider, or a broker with a publicly signed certificate, must verify there too. Roots the
// system does have (a host's /etc/ssl, or SSL_CERT_FILE / SSL_CERT_DIR) take precedence;
// a private CA is named in the configuration (auth.token.jwksCAFile, broker.tls.trustCertsFile).
// Keep the module current: its roots change as Mozilla's store does.
import _ "golang.org/x/crypto/x509roots/fallback"
