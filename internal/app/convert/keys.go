package convert

// apacheKey is one setting of Apache Pulsar's 4.x proxy: its default as proxy.conf spells it,
// and, for a setting pulsar-proxy has no counterpart for, why it is not carried over. Mapped
// settings have no reason here; convert.go maps them (see mappedKeys).
type apacheKey struct {
	def string // Apache's default ("" = unset)
	// varies: the default depends on the machine (thread counts, temp directory); def is then
	// empty and variesAs says what it is.
	varies   bool
	variesAs string
	reason   string // why it is not carried over ("" = mapped)
	// harmless: not carrying it over changes nothing a client or operator sees (thread
	// counts, a cluster name the proxy never uses), so it is never flagged for review.
	harmless bool
}

// Reasons shared by several keys.
const (
	reasonConfigStore   = "the configuration store holds tenants' and namespaces' policies, which Apache's proxy reads to authorize clients; pulsar-proxy finds the brokers in the local metadata store (metadataStoreUrl) and reads no policies from it (see authorizationEnabled)"
	reasonStoreCache    = "discovery.metadataStore follows the brokers with a ZooKeeper watch: there is no cache to expire"
	reasonStoreReadOnly = "discovery.metadataStore does not use read-only ZooKeeper servers: while no server answers it keeps the last list (reported stale)"
	reasonHTTPPlane     = "the admin API on listen.http has no setting for this: it takes no PROXY header, always sets X-Forwarded-For and -Proto from the connection, and logs one access line per request (admin.accessLog)"
	reasonThreads       = "a Netty or Jetty thread pool: Go's runtime schedules the work (GOMAXPROCS); there are no thread pools to size"
	reasonJetty         = "a Jetty tuning knob: Go's HTTP server sizes its own buffers and queues (the admin API's limits are admin.*)"
	reasonJavaTLS       = "pulsar-proxy uses Go's crypto/tls: there is no JSSE or OpenSSL provider to choose"
	reasonSSLFactory    = "pulsar-proxy loads no TLS factory plugin: give the certificates and keys such a factory supplied as PEM files (tls.certFile, tls.keyFile, tls.clientCAFile; broker.tls.* towards brokers)"
	reasonReverseProxy  = "the admin API forwards Pulsar's admin, lookup and Functions paths only: route other paths (httpReverseProxy.NAME.path and .proxyTo) at your ingress or load balancer"
	reasonHTTPRate      = "pulsar-proxy bounds the admin requests in flight (admin.maxConcurrentRequests, admin.maxConcurrentRequestsPerPrincipal), not their rate: limit the rate at your ingress if you need to"
	reasonTopicListMem  = "pulsar-proxy keeps no separate memory budget for topic lists: the lookups being answered are bounded by session.maxLookupsInFlight (per connection by session.maxPendingLookups) and each broker answer by session.maxFrameSize"
	reasonKeyStore      = "pulsar-proxy reads PEM files only: export the KeyStore to PEM (keytool -importkeystore -deststoretype PKCS12, then openssl pkcs12 -nodes) and set the PEM paths"
	reasonSASL          = "Kerberos (SASL) authentication is not supported"
	reasonPlugins       = "pulsar-proxy loads no extensions, servlets or NAR packages"
	reasonWebSocket     = "not converted: set websocket.* by hand (docs/websocket.md)"
	reasonMetrics       = "/metrics is served on listen.http without authentication or time-out settings; restrict who reaches that port (the chart's Service, a NetworkPolicy)"
	reasonAuthz         = "Apache's proxy authorizes against the namespace permissions in the metadata store; pulsar-proxy leaves that to the brokers, which authorize the original_principal it sends, or applies its own policy file (authz.enabled, authz.policyFile; super-user roles go in that file's superUserRoles)"
	reasonWebTLS        = "admin.listenHTTPS serves the client listener's TLS settings (tls.minVersion, tls.cipherSuites): set those"
	reasonPropertyKnown = "a Pulsar client or provider property with no counterpart in pulsar-proxy"
)

// apacheKeys are the settings of Apache Pulsar's 4.x proxy: the fields of ProxyConfiguration
// in Pulsar 4.0.8 (checked against the jar by the end-to-end tests), those added since (the
// 4.1.x configuration reference), the keys conf/proxy.conf lists, and the properties of the
// authentication providers (the token provider's, OpenID Connect's, basic authentication's).
// testdata/proxy-4.x-keys.tsv lists them with Apache's defaults, for the tests.
var apacheKeys = map[string]apacheKey{
	// Broker discovery.
	"metadataStoreUrl":                     {},
	"configurationMetadataStoreUrl":        {reason: reasonConfigStore, harmless: true},
	"zookeeperServers":                     {},
	"configurationStoreServers":            {reason: reasonConfigStore, harmless: true},
	"globalZookeeperServers":               {reason: reasonConfigStore, harmless: true},
	"metadataStoreSessionTimeoutMillis":    {def: "30000"},
	"metadataStoreCacheExpirySeconds":      {def: "300", reason: reasonStoreCache, harmless: true},
	"metadataStoreAllowReadOnlyOperations": {def: "false", reason: reasonStoreReadOnly},
	"zookeeperSessionTimeoutMs":            {def: "-1"},
	"zooKeeperCacheExpirySeconds":          {def: "-1", reason: reasonStoreCache, harmless: true},
	"zooKeeperAllowReadOnlyOperations":     {def: "false", reason: reasonStoreReadOnly},
	"brokerServiceURL":                     {},
	"brokerServiceURLTLS":                  {},
	"brokerWebServiceURL":                  {},
	"brokerWebServiceURLTLS":               {},
	"functionWorkerWebServiceURL":          {},
	"functionWorkerWebServiceURLTLS":       {},
	"checkActiveBrokers":                   {def: "false"},

	// Connections to brokers and the target rule.
	"brokerProxyConnectTimeoutMs":   {def: "10000"},
	"brokerProxyReadTimeoutMs":      {def: "75000", reason: "direct sessions have no idle read time-out in pulsar-proxy; the keep-alive between client and broker closes dead connections"},
	"brokerProxyAllowedHostNames":   {def: "*"},
	"brokerProxyAllowedIPAddresses": {def: "*"},
	"brokerProxyAllowedTargetPorts": {def: "6650,6651"},

	// Server.
	"bindAddress":                      {def: "0.0.0.0"},
	"advertisedAddress":                {reason: "pulsar-proxy advertises no address of its own: lookup answers send clients back through the address they connected to (proxy_through_service_url)"},
	"keepAliveIntervalSeconds":         {def: "30"},
	"haProxyProtocolEnabled":           {def: "false"},
	"webServiceHaProxyProtocolEnabled": {def: "false", reason: reasonHTTPPlane},
	"webServiceTrustXForwardedFor":     {def: "false", reason: reasonHTTPPlane},
	"webServiceLogDetailedAddresses":   {reason: reasonHTTPPlane},
	"proxyZeroCopyModeEnabled":         {def: "true"},
	"servicePort":                      {def: "6650"},
	"servicePortTls":                   {},
	"webServicePort":                   {def: "8080"},
	"webServicePortTls":                {},
	"webServiceTlsProvider":            {def: "Conscrypt", reason: reasonJavaTLS, harmless: true},
	"webServiceTlsProtocols":           {reason: reasonWebTLS},
	"webServiceTlsCiphers":             {reason: reasonWebTLS},
	"narExtractionDirectory":           {varies: true, variesAs: "the JVM's temporary directory (java.io.tmpdir)", reason: reasonPlugins, harmless: true},
	"proxyLogLevel":                    {def: "0"},
	"statusFilePath":                   {reason: "use /readyz instead: it answers 503 while no broker answers and from SIGTERM on, while the proxy drains its sessions"},
	"maxMessageSize":                   {def: "5242880"},
	"clusterName":                      {reason: "not needed: pulsar-proxy does not use the cluster name", harmless: true},
	"numIOThreads":                     {varies: true, variesAs: "2 × the machine's processors", reason: reasonThreads, harmless: true},
	"numAcceptorThreads":               {def: "1", reason: reasonThreads, harmless: true},

	// Authentication and authorization.
	"superUserRoles":                  {reason: reasonAuthz},
	"authenticationEnabled":           {def: "false"},
	"authenticationProviders":         {},
	"authorizationEnabled":            {def: "false", reason: reasonAuthz},
	"authorizationProvider":           {def: "org.apache.pulsar.broker.authorization.PulsarAuthorizationProvider", reason: reasonAuthz},
	"forwardAuthorizationCredentials": {def: "false"},
	"authenticationRefreshCheckSeconds": {def: "60",
		reason: "pulsar-proxy checks credentials when they expire (an AUTH_CHALLENGE, answered within auth.refreshTimeout), not on a timer", harmless: true},
	"anonymousUserRole":                       {},
	"enableProxyStatsEndpoints":               {def: "true", reason: reasonMetrics},
	"authenticateMetricsEndpoint":             {def: "true", reason: reasonMetrics},
	"metricsServletTimeoutMs":                 {def: "30000", reason: reasonMetrics, harmless: true},
	"saslJaasClientAllowedIds":                {def: ".*pulsar.*", reason: reasonSASL, harmless: true},
	"saslJaasServerSectionName":               {def: "PulsarProxy", reason: reasonSASL, harmless: true},
	"saslJaasServerRoleTokenSignerSecretPath": {reason: reasonSASL},
	"kinitCommand":                            {def: "/usr/bin/kinit", reason: reasonSASL, harmless: true},

	// Limits.
	"maxConcurrentInboundConnections":      {def: "10000"},
	"maxConcurrentInboundConnectionsPerIp": {def: "0"},
	"maxConcurrentLookupRequests":          {def: "50000"},

	// Settings added after 4.0.8 (the 4.1.x configuration reference).
	"authenticationRoleLoggingAnonymizer": {def: "NONE",
		reason: "pulsar-proxy cannot anonymize roles in its logs: a role appears in the session summary line (log.sessionSummary, at debug by default) and in the admin API's access log (admin.accessLog); turn those off, or restrict who reads the logs"},
	"maxTopicListInFlightHeapMemSizeMB":                            {def: "100", reason: reasonTopicListMem},
	"maxTopicListInFlightDirectMemSizeMB":                          {def: "100", reason: reasonTopicListMem},
	"maxTopicListInFlightHeapMemSizePermitsAcquireTimeoutMillis":   {def: "25000", reason: reasonTopicListMem},
	"maxTopicListInFlightHeapMemSizePermitsAcquireQueueSize":       {def: "10000", reason: reasonTopicListMem},
	"maxTopicListInFlightDirectMemSizePermitsAcquireTimeoutMillis": {def: "25000", reason: reasonTopicListMem},
	"maxTopicListInFlightDirectMemSizePermitsAcquireQueueSize":     {def: "10000", reason: reasonTopicListMem},
	"proxyHttpResponseHeadersJson": {
		reason: "the admin API adds no configured response headers: add them where the ingress or load balancer answers"},

	// Listed in proxy.conf, read by no setting of the proxy.
	"metricsBufferResponse": {def: "false",
		reason: "listed in Apache's proxy.conf, but its proxy does not read it (a broker setting): nothing to carry over; pulsar-proxy renders /metrics on each scrape", harmless: true},

	// The proxy as a client of the brokers.
	"brokerClientAuthenticationPlugin":     {},
	"brokerClientAuthenticationParameters": {},
	"brokerClientTrustCertsFilePath":       {},
	"brokerClientKeyFilePath":              {},
	"brokerClientCertificateFilePath":      {},
	"tlsEnabledWithBroker":                 {def: "false"},
	"tlsHostnameVerificationEnabled":       {def: "false"},
	"brokerClientTlsEnabledWithKeyStore":   {def: "false", reason: reasonKeyStore},
	"brokerClientSslProvider":              {reason: reasonJavaTLS, harmless: true},
	"brokerClientTlsKeyStoreType":          {def: "JKS", reason: reasonKeyStore},
	"brokerClientTlsKeyStore":              {reason: reasonKeyStore},
	"brokerClientTlsKeyStorePassword":      {reason: reasonKeyStore},
	"brokerClientTlsTrustStoreType":        {def: "JKS", reason: reasonKeyStore},
	"brokerClientTlsTrustStore":            {reason: reasonKeyStore},
	"brokerClientTlsTrustStorePassword":    {reason: reasonKeyStore},
	"brokerClientTlsCiphers":               {reason: "pulsar-proxy offers brokers Go's default cipher suites; only the lowest TLS version is set (broker.tls.minVersion)"},
	"brokerClientTlsProtocols":             {},
	"brokerClientSslFactoryPlugin":         {def: "org.apache.pulsar.common.util.DefaultPulsarSslFactory", reason: reasonSSLFactory},
	"brokerClientSslFactoryPluginParams":   {reason: reasonSSLFactory},

	// TLS for clients.
	"tlsEnabledInProxy":              {def: "false", reason: "deprecated in Pulsar: servicePortTls opens the TLS listener", harmless: true},
	"tlsCertRefreshCheckDurationSec": {def: "300", reason: "certificates are re-read when their files change (looked at, at most once a second, on a TLS handshake)", harmless: true},
	"tlsCertificateFilePath":         {},
	"tlsKeyFilePath":                 {},
	"tlsTrustCertsFilePath":          {},
	"tlsAllowInsecureConnection": {def: "false",
		reason: "pulsar-proxy never accepts a client certificate it cannot verify: a client whose certificate does not chain to tls.clientCAFile is refused"},
	"tlsProtocols":                         {},
	"tlsCiphers":                           {},
	"tlsRequireTrustedClientCertOnConnect": {def: "false"},
	"tlsEnabledWithKeyStore":               {def: "false", reason: reasonKeyStore},
	"tlsProvider":                          {reason: reasonJavaTLS, harmless: true},
	"tlsKeyStoreType":                      {def: "JKS", reason: reasonKeyStore},
	"tlsKeyStore":                          {reason: reasonKeyStore},
	"tlsKeyStorePassword":                  {reason: reasonKeyStore},
	"tlsTrustStoreType":                    {def: "JKS", reason: reasonKeyStore},
	"tlsTrustStore":                        {reason: reasonKeyStore},
	"tlsTrustStorePassword":                {reason: reasonKeyStore},
	"sslFactoryPlugin":                     {def: "org.apache.pulsar.common.util.DefaultPulsarSslFactory", reason: reasonSSLFactory},
	"sslFactoryPluginParams":               {reason: reasonSSLFactory},

	// HTTP.
	"httpReverseProxyConfigs":  {reason: reasonReverseProxy},
	"httpOutputBufferSize":     {def: "32768", reason: reasonJetty, harmless: true},
	"httpMaxRequestHeaderSize": {def: "8192", reason: "pulsar-proxy's HTTP listeners accept request headers of up to 64 KiB; there is no setting for it"},
	"httpInputMaxReplayBufferSize": {def: "5242880", harmless: true,
		reason: "pulsar-proxy keeps a request body for a broker's redirect on disk, up to admin.maxRequestBodySize (admin.maxSpooledBytes in all), not in a replay buffer"},
	"httpProxyTimeout":              {def: "300000"},
	"httpNumThreads":                {varies: true, variesAs: "2 × the machine's processors, at least 8", reason: reasonThreads, harmless: true},
	"maxConcurrentHttpRequests":     {def: "1024"},
	"httpServerThreadPoolQueueSize": {def: "8192", reason: reasonJetty, harmless: true},
	"httpServerAcceptQueueSize":     {def: "8192", reason: reasonJetty, harmless: true},
	"maxHttpServerConnections": {def: "2048",
		reason: "the HTTP listeners count their connections against session.maxConnections and session.maxConnectionsPerIP (each listener its own): there is no separate HTTP connection limit"},
	"httpRequestsLimitEnabled":                {def: "false", reason: reasonHTTPRate},
	"httpRequestsMaxPerSecond":                {def: "100.0", reason: reasonHTTPRate},
	"proxyAdditionalServletDirectory":         {def: "./proxyAdditionalServlet", reason: reasonPlugins},
	"additionalServletDirectory":              {def: "./proxyAdditionalServlet", reason: reasonPlugins},
	"proxyAdditionalServlets":                 {reason: reasonPlugins},
	"additionalServlets":                      {reason: reasonPlugins},
	"proxyExtensionsDirectory":                {def: "./proxyextensions", reason: reasonPlugins},
	"proxyExtensions":                         {reason: reasonPlugins},
	"useSeparateThreadPoolForProxyExtensions": {def: "true", reason: reasonPlugins, harmless: true},
	"webSocketServiceEnabled":                 {def: "false", reason: reasonWebSocket},
	"webSocketPingDurationSeconds":            {def: "-1", reason: reasonWebSocket},

	// Properties read by the authentication providers (proxy.conf documents them).
	"tokenSecretKey":               {},
	"tokenPublicKey":               {},
	"tokenAuthClaim":               {def: "sub"},
	"tokenAllowedClockSkewSeconds": {def: "0"},
	"tokenAudienceClaim":           {},
	"tokenAudience":                {},
	"tokenPublicAlg":               {def: "RS256"},
	"tokenSettingPrefix":           {reason: "pulsar-proxy has one token provider; its settings are auth.token.*"},
	"basicAuthConf":                {reason: "basic authentication is not supported; clients authenticate with tokens or certificates"},
	// OpenID Connect (AuthenticationProviderOpenID).
	"openIDAllowedTokenIssuers":           {},
	"openIDAllowedAudiences":              {},
	"openIDRoleClaim":                     {def: "sub"},
	"openIDAcceptedTimeLeewaySeconds":     {def: "0"},
	"openIDRequireIssuersUseHttps":        {def: "true", reason: "pulsar-proxy fetches the key set over https always (plain http to a loopback address only)"},
	"openIDTokenIssuerTrustCertsFilePath": {},
	"openIDKeyIdCacheMissRefreshSeconds":  {def: "300"},
	"openIDFallbackDiscoveryMode":         {def: "DISABLED", reason: "pulsar-proxy reads no discovery document and no Kubernetes API: auth.token.jwksURL names the key set"},
	"openIDCacheSize":                     {def: "5", reason: "pulsar-proxy keeps one key set", harmless: true},
	"openIDCacheRefreshAfterWriteSeconds": {def: "64800"},
	"openIDCacheExpirationSeconds":        {def: "86400", reason: "the key set is kept until the next refresh succeeds", harmless: true},
	"openIDHttpConnectionTimeoutMillis":   {def: "10000"},
	"openIDHttpReadTimeoutMillis":         {def: "10000", reason: "one time-out bounds a key set fetch: auth.token.jwksTimeout (from openIDHttpConnectionTimeoutMillis)", harmless: true},
}

// mappedKeys are the settings convert.go carries over (each is in apacheKeys without a reason).
var mappedKeys = []string{
	"brokerServiceURL", "brokerServiceURLTLS", "checkActiveBrokers",
	"metadataStoreUrl", "zookeeperServers", "metadataStoreSessionTimeoutMillis", "zookeeperSessionTimeoutMs",
	"brokerProxyConnectTimeoutMs", "brokerProxyAllowedHostNames", "brokerProxyAllowedIPAddresses", "brokerProxyAllowedTargetPorts",
	"bindAddress", "keepAliveIntervalSeconds", "haProxyProtocolEnabled", "proxyZeroCopyModeEnabled",
	"servicePort", "servicePortTls", "webServicePort", "proxyLogLevel", "maxMessageSize",
	"authenticationEnabled", "authenticationProviders", "forwardAuthorizationCredentials", "anonymousUserRole",
	"maxConcurrentInboundConnections", "maxConcurrentInboundConnectionsPerIp",
	"brokerClientAuthenticationPlugin", "brokerClientAuthenticationParameters", "brokerClientTrustCertsFilePath",
	"brokerClientKeyFilePath", "brokerClientCertificateFilePath", "tlsEnabledWithBroker", "tlsHostnameVerificationEnabled",
	"brokerClientTlsProtocols",
	"tlsCertificateFilePath", "tlsKeyFilePath", "tlsTrustCertsFilePath", "tlsProtocols", "tlsCiphers", "tlsRequireTrustedClientCertOnConnect",
	"tokenSecretKey", "tokenPublicKey", "tokenAuthClaim", "tokenAudienceClaim", "tokenAudience", "tokenPublicAlg",
	"tokenAllowedClockSkewSeconds", "maxConcurrentLookupRequests", "httpProxyTimeout", "maxConcurrentHttpRequests",
	"openIDAllowedTokenIssuers", "openIDAllowedAudiences", "openIDRoleClaim", "openIDAcceptedTimeLeewaySeconds",
	"openIDTokenIssuerTrustCertsFilePath", "openIDCacheRefreshAfterWriteSeconds", "openIDKeyIdCacheMissRefreshSeconds",
	"openIDHttpConnectionTimeoutMillis",
	"brokerWebServiceURL", "brokerWebServiceURLTLS", "functionWorkerWebServiceURL", "functionWorkerWebServiceURLTLS",
	"webServicePortTls",
}
