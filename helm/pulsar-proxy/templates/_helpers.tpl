{{/* Names and labels. */}}
{{- define "pulsar-proxy.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "pulsar-proxy.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "pulsar-proxy.selectorLabels" -}}
app.kubernetes.io/name: {{ include "pulsar-proxy.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "pulsar-proxy.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "pulsar-proxy.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "pulsar-proxy.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "pulsar-proxy.fullname" .) -}}
{{- else -}}
{{- .Values.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{/* Where the chart mounts files; the rendered config points at them. */}}
{{- define "pulsar-proxy.configDir" -}}/etc/pulsar-proxy{{- end -}}
{{- define "pulsar-proxy.secretsDir" -}}/var/run/pulsar-proxy{{- end -}}

{{/* The port of a host:port listen address, e.g. "0.0.0.0:8080" -> 8080. */}}
{{- define "pulsar-proxy.port" -}}
{{- regexReplaceAll "^.*:" . "" | int -}}
{{- end -}}

{{/* Whole seconds (rounded up) of a Go duration such as "30s", "1m30s" or "500ms". */}}
{{- define "pulsar-proxy.seconds" -}}
{{- $total := 0 -}}
{{- range regexFindAll "[0-9]+(ms|h|m|s)" . -1 -}}
{{- $n := regexFind "^[0-9]+" . | int -}}
{{- $unit := regexReplaceAll "^[0-9]+" . "" -}}
{{- if eq $unit "h" }}{{ $total = add $total (mul $n 3600) }}
{{- else if eq $unit "m" }}{{ $total = add $total (mul $n 60) }}
{{- else if eq $unit "s" }}{{ $total = add $total $n }}
{{- else }}{{ $total = add $total (div (add $n 999) 1000) }}{{ end -}}
{{- end -}}
{{- $total -}}
{{- end -}}

{{/* The proxy's listen addresses, with the proxy's defaults. */}}
{{- define "pulsar-proxy.httpPort" -}}
{{- include "pulsar-proxy.port" (dig "listen" "http" "0.0.0.0:8080" .Values.config) -}}
{{- end -}}
{{/* "true" unless config.listen.pulsar is "" (a TLS-only proxy: no plaintext Pulsar port in
the pod or the Service). Without TLS the chart refuses it, as the proxy would. */}}
{{- define "pulsar-proxy.plaintextOn" -}}
{{- if ne (dig "listen" "pulsar" "0.0.0.0:6650" .Values.config | toString) "" -}}true
{{- else if not (include "pulsar-proxy.tlsOn" .) -}}
{{- fail "config.listen.pulsar is empty (TLS only) but TLS is off: set tls.enabled (or tls.certManager.enabled), or give config.listen.pulsar an address" -}}
{{- end -}}
{{- end -}}
{{- define "pulsar-proxy.pulsarPort" -}}
{{- include "pulsar-proxy.port" (dig "listen" "pulsar" "0.0.0.0:6650" .Values.config) -}}
{{- end -}}
{{- define "pulsar-proxy.pulsarTLSAddr" -}}
{{- dig "listen" "pulsarTLS" "" .Values.config | default "0.0.0.0:6651" -}}
{{- end -}}
{{/* Client-facing TLS is on with tls.enabled, or with tls.certManager.enabled (which issues
the certificate it serves). */}}
{{- define "pulsar-proxy.tlsOn" -}}
{{- if or .Values.tls.enabled .Values.tls.certManager.enabled -}}true{{- end -}}
{{- end -}}
{{/* The Secret with the listeners' certificate: tls.secretName, or with cert-manager by
default <fullname>-tls. */}}
{{- define "pulsar-proxy.tlsSecretName" -}}
{{- if .Values.tls.secretName -}}
{{- .Values.tls.secretName -}}
{{- else if .Values.tls.certManager.enabled -}}
{{- printf "%s-tls" (include "pulsar-proxy.fullname" .) -}}
{{- else -}}
{{- fail "tls.secretName is required with tls.enabled (or turn tls.certManager.enabled on to have cert-manager issue it)" -}}
{{- end -}}
{{- end -}}
{{/* The admin API over HTTPS (admin.listenHTTPS) is served with TLS on, as the Apache
chart's proxy serves https beside pulsar+ssl; not when config.admin.enabled is false. */}}
{{- define "pulsar-proxy.httpsOn" -}}
{{- if and (include "pulsar-proxy.tlsOn" .) (dig "admin" "enabled" true .Values.config) -}}true{{- end -}}
{{- end -}}
{{- define "pulsar-proxy.httpsAddr" -}}
{{- dig "admin" "listenHTTPS" "" .Values.config | default "0.0.0.0:8443" -}}
{{- end -}}

{{/* terminationGracePeriodSeconds: the preStop sleep, then the whole drain, then a margin. */}}
{{- define "pulsar-proxy.gracePeriod" -}}
{{- $drain := include "pulsar-proxy.seconds" (dig "session" "drainTimeout" "30s" .Values.config) | int -}}
{{- add .Values.preStopSleepSeconds $drain .Values.terminationGraceMarginSeconds -}}
{{- end -}}

{{/*
The proxy's config.yaml: .Values.config with the paths of the files the chart mounts.
*/}}
{{- define "pulsar-proxy.config" -}}
{{- $dir := include "pulsar-proxy.secretsDir" . -}}
{{- $set := dict -}}
{{- if include "pulsar-proxy.tlsOn" . -}}
{{- $secret := include "pulsar-proxy.tlsSecretName" . -}}
{{- $tls := dict "certFile" (printf "%s/tls/tls.crt" $dir) "keyFile" (printf "%s/tls/tls.key" $dir) -}}
{{- if ne (dig "tls" "clientAuth" "none" .Values.config) "none" -}}
{{- $_ := set $tls "clientCAFile" (printf "%s/tls/ca.crt" $dir) -}}
{{- end -}}
{{- $_ := set $set "tls" $tls -}}
{{- $_ := set $set "listen" (dict "pulsarTLS" (include "pulsar-proxy.pulsarTLSAddr" .)) -}}
{{- if include "pulsar-proxy.httpsOn" . -}}
{{- $_ := set $set "admin" (dict "listenHTTPS" (include "pulsar-proxy.httpsAddr" .)) -}}
{{- end -}}
{{- end -}}
{{- $auth := dict -}}
{{- with .Values.brokerTLS.secretName -}}
{{- $btls := dict "enabled" true "trustCertsFile" (printf "%s/broker-tls/ca.crt" $dir) -}}
{{- if $.Values.brokerTLS.clientCertificate -}}
{{- $_ := set $btls "certFile" (printf "%s/broker-tls/tls.crt" $dir) -}}
{{- $_ := set $btls "keyFile" (printf "%s/broker-tls/tls.key" $dir) -}}
{{- end -}}
{{- $_ := set $set "broker" (dict "tls" $btls) -}}
{{- end -}}
{{- $token := dict -}}
{{- with .Values.tokenAuth.verificationKey -}}
{{- if .secretName -}}
{{- $kind := .kind | default "secretKey" -}}
{{- if not (has $kind (list "secretKey" "publicKey")) -}}
{{- fail "tokenAuth.verificationKey.kind must be secretKey or publicKey" -}}
{{- end -}}
{{- $_ := set $token (printf "%sFile" $kind) (printf "%s/token-key/%s" $dir (required "tokenAuth.verificationKey.key is required" .key)) -}}
{{- end -}}
{{- end -}}
{{- with .Values.tokenAuth.jwksCA -}}
{{- if .secretName -}}
{{- $_ := set $token "jwksCAFile" (printf "%s/jwks-ca/%s" $dir .key) -}}
{{- end -}}
{{- end -}}
{{- if $token -}}
{{- $_ := set $auth "token" $token -}}
{{- end -}}
{{- with .Values.tokenAuth.brokerToken -}}
{{- if .secretName -}}
{{- $_ := set $auth "brokerClient" (dict "tokenFile" (printf "%s/broker-token/%s" $dir .key)) -}}
{{- end -}}
{{- end -}}
{{- if $auth -}}
{{- $_ := set $set "auth" $auth -}}
{{- end -}}
{{- with .Values.authzPolicy.configMapName -}}
{{- $_ := set $set "authz" (dict "policyFile" (printf "%s/policy/%s" $dir $.Values.authzPolicy.key)) -}}
{{- end -}}
{{- toYaml (mustMergeOverwrite (deepCopy .Values.config) $set) -}}
{{- end -}}

{{/*
The proxy container's volume mounts and the pod's volumes, shared by the Deployment and the
check-config test Pod (which must see the very same files): the config, /tmp, the Secrets
and ConfigMaps the values name, then extraVolumeMounts / extraVolumes. Directories, not
subPath mounts, so renewed certificates, rotated tokens and policy edits reach the running
proxy (it re-reads them).
*/}}
{{- define "pulsar-proxy.volumeMounts" -}}
{{- $secrets := include "pulsar-proxy.secretsDir" . -}}
- name: config
  mountPath: {{ include "pulsar-proxy.configDir" . }}
  readOnly: true
# The admin proxy's spool: request bodies beyond 256 KiB while a
# redirect may need them (the root file system is read-only).
- name: tmp
  mountPath: /tmp
{{- if include "pulsar-proxy.tlsOn" . }}
- name: tls
  mountPath: {{ $secrets }}/tls
  readOnly: true
{{- end }}
{{- if .Values.brokerTLS.secretName }}
- name: broker-tls
  mountPath: {{ $secrets }}/broker-tls
  readOnly: true
{{- end }}
{{- if .Values.tokenAuth.verificationKey.secretName }}
- name: token-key
  mountPath: {{ $secrets }}/token-key
  readOnly: true
{{- end }}
{{- if .Values.tokenAuth.jwksCA.secretName }}
- name: jwks-ca
  mountPath: {{ $secrets }}/jwks-ca
  readOnly: true
{{- end }}
{{- if .Values.tokenAuth.brokerToken.secretName }}
- name: broker-token
  mountPath: {{ $secrets }}/broker-token
  readOnly: true
{{- end }}
{{- if .Values.authzPolicy.configMapName }}
- name: policy
  mountPath: {{ $secrets }}/policy
  readOnly: true
{{- end }}
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "pulsar-proxy.volumes" -}}
- name: config
  configMap:
    name: {{ include "pulsar-proxy.fullname" . }}
- name: tmp
  emptyDir:
    sizeLimit: {{ .Values.tmpSizeLimit }}
{{- if include "pulsar-proxy.tlsOn" . }}
- name: tls
  secret:
    secretName: {{ include "pulsar-proxy.tlsSecretName" . }}
    defaultMode: 0440
{{- end }}
{{- with .Values.brokerTLS.secretName }}
- name: broker-tls
  secret:
    secretName: {{ . }}
    defaultMode: 0440
{{- end }}
{{- with .Values.tokenAuth.verificationKey.secretName }}
- name: token-key
  secret:
    secretName: {{ . }}
    defaultMode: 0440
{{- end }}
{{- with .Values.tokenAuth.jwksCA.secretName }}
- name: jwks-ca
  secret:
    secretName: {{ . }}
    defaultMode: 0440
{{- end }}
{{- with .Values.tokenAuth.brokerToken.secretName }}
- name: broker-token
  secret:
    secretName: {{ . }}
    defaultMode: 0440
{{- end }}
{{- with .Values.authzPolicy.configMapName }}
- name: policy
  configMap:
    name: {{ . }}
{{- end }}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The pod's security context, shared by the Deployment and the check-config test Pod. */}}
{{- define "pulsar-proxy.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* The proxy container's security context. */}}
{{- define "pulsar-proxy.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/*
One probe: an httpGet of path on the http port with the timings of .Values.probe.<name>
(arguments: root context, probe name, path). successThreshold only for readiness (Kubernetes
requires 1 for liveness and startup probes).
*/}}
{{- define "pulsar-proxy.probe" -}}
{{- $root := index . 0 -}}
{{- $name := index . 1 -}}
{{- $p := index $root.Values.probe $name -}}
httpGet:
  path: {{ index . 2 }}
  port: http
{{- with $p.initialDelaySeconds }}
initialDelaySeconds: {{ . }}
{{- end }}
periodSeconds: {{ $p.periodSeconds }}
timeoutSeconds: {{ $p.timeoutSeconds }}
failureThreshold: {{ $p.failureThreshold }}
{{- if and (eq $name "readiness") $p.successThreshold }}
successThreshold: {{ $p.successThreshold }}
{{- end }}
{{- end -}}

{{/*
The pod's affinity: .Values.affinity, with a pod anti-affinity across podAntiAffinity.topologyKey
(soft: preferred, hard: required) unless affinity names its own podAntiAffinity or
podAntiAffinity.type is none.
*/}}
{{- define "pulsar-proxy.affinity" -}}
{{- $affinity := deepCopy (.Values.affinity | default dict) -}}
{{- $aa := .Values.podAntiAffinity -}}
{{- if not (has $aa.type (list "soft" "hard" "none")) -}}
{{- fail (printf "podAntiAffinity.type must be soft, hard or none, not %q" $aa.type) -}}
{{- end -}}
{{- if and (ne $aa.type "none") (not (hasKey $affinity "podAntiAffinity")) -}}
{{- $term := dict "topologyKey" $aa.topologyKey "labelSelector" (dict "matchLabels" (include "pulsar-proxy.selectorLabels" . | fromYaml)) -}}
{{- if eq $aa.type "hard" -}}
{{- $_ := set $affinity "podAntiAffinity" (dict "requiredDuringSchedulingIgnoredDuringExecution" (list $term)) -}}
{{- else -}}
{{- $_ := set $affinity "podAntiAffinity" (dict "preferredDuringSchedulingIgnoredDuringExecution" (list (dict "weight" (int $aa.weight) "podAffinityTerm" $term))) -}}
{{- end -}}
{{- end -}}
{{- if $affinity -}}
{{- toYaml $affinity -}}
{{- end -}}
{{- end -}}

{{/*
The pod's topology spread: .Values.topologySpreadConstraints when given, else one constraint
across topologySpread.topologyKey (zones) when topologySpread.enabled; pod-template-hash in
matchLabelKeys counts only the pods of one ReplicaSet, so a rolling update does not skew it.
*/}}
{{- define "pulsar-proxy.topologySpread" -}}
{{- if .Values.topologySpreadConstraints -}}
{{- toYaml .Values.topologySpreadConstraints -}}
{{- else if .Values.topologySpread.enabled -}}
{{- $ts := .Values.topologySpread -}}
- maxSkew: {{ $ts.maxSkew }}
  topologyKey: {{ $ts.topologyKey }}
  whenUnsatisfiable: {{ $ts.whenUnsatisfiable }}
  labelSelector:
    matchLabels:
      {{- include "pulsar-proxy.selectorLabels" . | nindent 6 }}
  matchLabelKeys:
    - pod-template-hash
{{- end -}}
{{- end -}}
