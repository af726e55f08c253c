package convert

// ApacheDefaults returns every setting the converter knows of Apache Pulsar's 4.0.8 proxy with
// its default as proxy.conf spells it; machine-dependent defaults (thread counts, the temp
// directory) are left out of the values (varies is true). The end-to-end tests hold it to the
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
