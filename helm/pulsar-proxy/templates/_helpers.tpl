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
{{- define "pulsar-proxy.pulsarPort" -}}
{{- include "pulsar-proxy.port" (dig "listen" "pulsar" "0.0.0.0:6650" .Values.config) -}}
{{- end -}}
{{- define "pulsar-proxy.pulsarTLSAddr" -}}
{{- dig "listen" "pulsarTLS" "" .Values.config | default "0.0.0.0:6651" -}}
{{- end -}}
{{/* The admin API over HTTPS (admin.listenHTTPS) is served with tls.enabled, as the Apache
chart's proxy serves https beside pulsar+ssl; not when config.admin.enabled is false. */}}
{{- define "pulsar-proxy.httpsOn" -}}
{{- if and .Values.tls.enabled (dig "admin" "enabled" true .Values.config) -}}true{{- end -}}
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
{{- if .Values.tls.enabled -}}
{{- $secret := required "tls.secretName is required with tls.enabled" .Values.tls.secretName -}}
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
