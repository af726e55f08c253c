package convert

// ApacheDefaults returns every setting the converter knows of Apache Pulsar's 4.x proxy (4.0.8's
// ProxyConfiguration, the settings added since, the authentication providers' properties) with
// its default as proxy.conf spells it; machine-dependent defaults (thread counts, the temp
// directory) are left out of the values (varies is true). test/rig holds it to the
// ProxyConfiguration of the 4.0.8 jar.
func ApacheDefaults() map[string]struct {
	Default string
	Varies  bool
} {
	out := map[string]struct {
		Default string
		Varies  bool
	}{}
	for k, v := range apacheKeys {
		out[k] = struct {
			Default string
			Varies  bool
		}{v.def, v.varies}
	}
	return out
}
