package chartcheck

import (
	"errors"
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Certificate mirrors cert-manager's cert-manager.io/v1 Certificate as far as a manifest
// goes (no status), field for field, with the same JSON names: cert-manager's Go module is
// not among this module's dependencies (it would bring all of cert-manager). Checked against
// cert-manager v1.21 (pkg/apis/certmanager/v1/types_certificate.go); the nested types the
// chart never renders are mirrored too, so that their fields decode strictly as well.
type Certificate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              CertificateSpec `json:"spec"`
}

// CertificateSpec is the Certificate's desired state.
type CertificateSpec struct {
	Subject                 *X509Subject               `json:"subject,omitempty"`
	LiteralSubject          string                     `json:"literalSubject,omitempty"`
	CommonName              string                     `json:"commonName,omitempty"`
	Duration                *metav1.Duration           `json:"duration,omitempty"`
	RenewBefore             *metav1.Duration           `json:"renewBefore,omitempty"`
	RenewBeforePercentage   *int32                     `json:"renewBeforePercentage,omitempty"`
	Renewal                 *CertificateRenewal        `json:"renewal,omitempty"`
	DNSNames                []string                   `json:"dnsNames,omitempty"`
	IPAddresses             []string                   `json:"ipAddresses,omitempty"`
	URIs                    []string                   `json:"uris,omitempty"`
	OtherNames              []OtherName                `json:"otherNames,omitempty"`
	EmailAddresses          []string                   `json:"emailAddresses,omitempty"`
	SecretName              string                     `json:"secretName"`
	SecretTemplate          *CertificateSecretTemplate `json:"secretTemplate,omitempty"`
	Keystores               *CertificateKeystores      `json:"keystores,omitempty"`
	IssuerRef               IssuerReference            `json:"issuerRef"`
	IsCA                    bool                       `json:"isCA,omitempty"`
	Usages                  []string                   `json:"usages,omitempty"`
	PrivateKey              *CertificatePrivateKey     `json:"privateKey,omitempty"`
	SignatureAlgorithm      string                     `json:"signatureAlgorithm,omitempty"`
	EncodeUsagesInRequest   *bool                      `json:"encodeUsagesInRequest,omitempty"`
	RevisionHistoryLimit    *int32                     `json:"revisionHistoryLimit,omitempty"`
	AdditionalOutputFormats []AdditionalOutputFormat   `json:"additionalOutputFormats,omitempty"`
	NameConstraints         *NameConstraints           `json:"nameConstraints,omitempty"`
}

// X509Subject is the certificate's full subject.
type X509Subject struct {
	Organizations       []string `json:"organizations,omitempty"`
	Countries           []string `json:"countries,omitempty"`
	OrganizationalUnits []string `json:"organizationalUnits,omitempty"`
	Localities          []string `json:"localities,omitempty"`
	Provinces           []string `json:"provinces,omitempty"`
	StreetAddresses     []string `json:"streetAddresses,omitempty"`
	PostalCodes         []string `json:"postalCodes,omitempty"`
	SerialNumber        string   `json:"serialNumber,omitempty"`
}

// CertificateRenewal is when renewals may happen.
type CertificateRenewal struct {
	Policy  string                      `json:"policy,omitempty"`
	Windows []CertificateRenewalWindows `json:"windows,omitempty"`
}

// CertificateRenewalWindows is one renewal window.
type CertificateRenewalWindows struct {
	Timezone       string           `json:"timezone,omitempty"`
	WindowDuration *metav1.Duration `json:"windowDuration,omitempty"`
	Cron           string           `json:"cron,omitempty"`
}

// OtherName is an otherName subject alternative name.
type OtherName struct {
	OID       string `json:"oid,omitempty"`
	UTF8Value string `json:"utf8Value,omitempty"`
}

// CertificateSecretTemplate is what the issued Secret carries besides its data.
type CertificateSecretTemplate struct {
	Annotations map[string]string `json:"annotations,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
}

// CertificateKeystores are the keystores written beside the PEM files.
type CertificateKeystores struct {
	JKS    *JKSKeystore    `json:"jks,omitempty"`
	PKCS12 *PKCS12Keystore `json:"pkcs12,omitempty"`
}

// JKSKeystore is a JKS keystore.
type JKSKeystore struct {
	Create            bool              `json:"create"`
	Alias             *string           `json:"alias,omitempty"`
	PasswordSecretRef SecretKeySelector `json:"passwordSecretRef,omitempty"`
	Password          *string           `json:"password,omitempty"`
}

// PKCS12Keystore is a PKCS#12 keystore.
type PKCS12Keystore struct {
	Create            bool              `json:"create"`
	Profile           string            `json:"profile,omitempty"`
	PasswordSecretRef SecretKeySelector `json:"passwordSecretRef,omitempty"`
	Password          *string           `json:"password,omitempty"`
}

// SecretKeySelector names a key of a Secret.
type SecretKeySelector struct {
	Name string `json:"name"`
	Key  string `json:"key,omitempty"`
}

// IssuerReference names the Issuer or ClusterIssuer.
type IssuerReference struct {
	Name  string `json:"name"`
	Kind  string `json:"kind,omitempty"`
	Group string `json:"group,omitempty"`
}

// CertificatePrivateKey is how the private key is made.
type CertificatePrivateKey struct {
	RotationPolicy string `json:"rotationPolicy,omitempty"`
	Encoding       string `json:"encoding,omitempty"`
	Algorithm      string `json:"algorithm,omitempty"`
	Size           int    `json:"size,omitempty"`
}

// AdditionalOutputFormat is another format written to the Secret.
type AdditionalOutputFormat struct {
	Type string `json:"type"`
}

// NameConstraints are a CA certificate's name constraints.
type NameConstraints struct {
	Critical  bool                `json:"critical,omitempty"`
	Permitted *NameConstraintItem `json:"permitted,omitempty"`
	Excluded  *NameConstraintItem `json:"excluded,omitempty"`
}

// NameConstraintItem lists names permitted or excluded.
type NameConstraintItem struct {
	DNSDomains     []string `json:"dnsDomains,omitempty"`
	IPRanges       []string `json:"ipRanges,omitempty"`
	EmailAddresses []string `json:"emailAddresses,omitempty"`
	URIDomains     []string `json:"uriDomains,omitempty"`
}

// The enumerations of the CRD's schema (kubebuilder validation markers of cert-manager v1.21).
var (
	keyUsages = []string{"signing", "digital signature", "content commitment", "key encipherment", "key agreement",
		"data encipherment", "cert sign", "crl sign", "encipher only", "decipher only", "any", "server auth", "client auth",
		"code signing", "email protection", "s/mime", "ipsec end system", "ipsec tunnel", "ipsec user", "timestamping",
		"ocsp signing", "microsoft sgc", "netscape sgc"}
	keyAlgorithms    = []string{"RSA", "ECDSA", "Ed25519"}
	keyEncodings     = []string{"PKCS1", "PKCS8"}
	rotationPolicies = []string{"Never", "Always"}
	keySizes         = map[string][]int{"RSA": {2048, 4096, 8192}, "ECDSA": {256, 384, 521}}
)

// Validate checks what the CRD's schema and cert-manager's webhook refuse of the fields the
// chart renders: a secret and an issuer named, at least one name, the enumerations, a key
// size that fits the algorithm, and durations of at least an hour (renewBefore five minutes,
// and shorter than the duration).
func (c *Certificate) Validate() error {
	s := c.Spec
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if s.SecretName == "" {
		bad("spec.secretName is required")
	}
	if s.IssuerRef.Name == "" {
		bad("spec.issuerRef.name is required")
	}
	if len(s.DNSNames)+len(s.IPAddresses)+len(s.URIs)+len(s.EmailAddresses)+len(s.OtherNames) == 0 && s.CommonName == "" && s.LiteralSubject == "" {
		bad("no name: give dnsNames, ipAddresses, uris, emailAddresses or a commonName")
	}
	for _, u := range s.Usages {
		if !slices.Contains(keyUsages, u) {
			bad("spec.usages: %q is not a key usage cert-manager knows", u)
		}
	}
	if pk := s.PrivateKey; pk != nil {
		if pk.Algorithm != "" && !slices.Contains(keyAlgorithms, pk.Algorithm) {
			bad("spec.privateKey.algorithm: %q is not one of %v", pk.Algorithm, keyAlgorithms)
		}
		if pk.Encoding != "" && !slices.Contains(keyEncodings, pk.Encoding) {
			bad("spec.privateKey.encoding: %q is not one of %v", pk.Encoding, keyEncodings)
		}
		if pk.RotationPolicy != "" && !slices.Contains(rotationPolicies, pk.RotationPolicy) {
			bad("spec.privateKey.rotationPolicy: %q is not one of %v", pk.RotationPolicy, rotationPolicies)
		}
		if sizes := keySizes[pk.Algorithm]; pk.Size != 0 && sizes != nil && !slices.Contains(sizes, pk.Size) {
			bad("spec.privateKey.size: %d is not one of %v for %s", pk.Size, sizes, pk.Algorithm)
		}
	}
	if s.Duration != nil && s.Duration.Duration < time.Hour {
		bad("spec.duration: %s is shorter than cert-manager's minimum of 1h", s.Duration.Duration)
	}
	if s.RenewBefore != nil {
		if s.RenewBefore.Duration < 5*time.Minute {
			bad("spec.renewBefore: %s is shorter than cert-manager's minimum of 5m", s.RenewBefore.Duration)
		}
		if s.Duration != nil && s.RenewBefore.Duration >= s.Duration.Duration {
			bad("spec.renewBefore: %s is not shorter than spec.duration %s", s.RenewBefore.Duration, s.Duration.Duration)
		}
	}
	return errors.Join(errs...)
}
