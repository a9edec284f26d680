{{/* The release's full name (release-chart, or the release if it already holds the chart's name). */}}
{{- define "burrow.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "burrow.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "burrow.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "burrow.serviceAccountName" -}}
{{- default (include "burrow.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* Where the sandbox pods and records live. */}}
{{- define "burrow.sandboxNamespace" -}}
{{- default .Release.Namespace .Values.kubernetes.namespace -}}
{{- end -}}

{{- define "burrow.databaseSecret" -}}
{{- if .Values.database.existingSecret -}}
{{- .Values.database.existingSecret -}}
{{- else -}}
{{- printf "%s-database" (include "burrow.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "burrow.databaseSecretKey" -}}
{{- if .Values.database.existingSecret -}}
{{- required "database.existingSecretKey: the key of database.existingSecret that holds the URL" .Values.database.existingSecretKey -}}
{{- else -}}
url
{{- end -}}
{{- end -}}

{{/* The port's name: https when the server terminates TLS. */}}
{{- define "burrow.portName" -}}
{{- ternary "https" "http" (not (empty .Values.tls.existingSecret)) -}}
{{- end -}}

{{- define "burrow.listen" -}}
{{- $addr := .Values.listenAddress | default (ternary "127.0.0.1" "0.0.0.0" .Values.hostNetwork) -}}
{{- printf "%s:%v" $addr .Values.service.port -}}
{{- end -}}

{{/*
Refuses the combinations that cannot work, each with the value to change.
A half-named execution cluster would otherwise fall back to in-cluster
credentials without a word.
*/}}
{{- define "burrow.validate" -}}
{{- $e := .Values.executionCluster -}}
{{- if and $e.kubeconfigSecret (not $e.kubeconfigKey) -}}
{{- fail "executionCluster.kubeconfigSecret is set but executionCluster.kubeconfigKey is not: name both (the Secret and its key holding the kubeconfig) or neither (in-cluster credentials)" -}}
{{- end -}}
{{- if and $e.kubeconfigKey (not $e.kubeconfigSecret) -}}
{{- fail "executionCluster.kubeconfigKey is set but executionCluster.kubeconfigSecret is not: name both (the Secret and its key holding the kubeconfig) or neither (in-cluster credentials)" -}}
{{- end -}}
{{- if and $e.context (not $e.kubeconfigSecret) -}}
{{- fail "executionCluster.context needs executionCluster.kubeconfigSecret and executionCluster.kubeconfigKey: a context is chosen in that kubeconfig" -}}
{{- end -}}
{{- $d := .Values.database -}}
{{- if and $d.url $d.existingSecret -}}
{{- fail "database.url and database.existingSecret are both set: set exactly one" -}}
{{- end -}}
{{- if not (or $d.url $d.existingSecret) -}}
{{- fail "database: set database.url (postgres://...) or database.existingSecret: every replica must reach the same Postgres database" -}}
{{- end -}}
{{- if and $d.url (not (or (hasPrefix "postgres://" $d.url) (hasPrefix "postgresql://" $d.url))) -}}
{{- fail "database.url must be a postgres:// URL: the replicas share one Postgres database" -}}
{{- end -}}
{{- if ne .Values.backend "kubernetes" -}}
{{- fail (printf "backend %q: this chart runs the kubernetes backend (sandboxes as pods); the local backend needs a host of its own" .Values.backend) -}}
{{- end -}}
{{- if not (regexMatch "^[0-9]+$" (toString .Values.replicas)) -}}
{{- fail (printf "replicas %q must be a whole number" (toString .Values.replicas)) -}}
{{- end -}}
{{- if lt (int .Values.replicas) 1 -}}
{{- fail "replicas must be at least 1" -}}
{{- end -}}
{{- if not (kindIs "bool" .Values.hostNetwork) -}}
{{- fail "hostNetwork must be true or false" -}}
{{- end -}}
{{- if not (has .Values.logFormat (list "json" "text")) -}}
{{- fail (printf "logFormat %q: use json or text" .Values.logFormat) -}}
{{- end -}}
{{- $rpm := toString .Values.auth.requestsPerMinute -}}
{{- if not (regexMatch "^[0-9]+$" $rpm) -}}
{{- fail (printf "auth.requestsPerMinute %q must be a whole number (0: no limit)" $rpm) -}}
{{- end -}}
{{- if gt (int64 $rpm) 1000000 -}}
{{- fail (printf "auth.requestsPerMinute %s is out of range: at most 1000000 (0: no limit)" $rpm) -}}
{{- end -}}
{{- $retention := toString .Values.audit.retention -}}
{{- if not (regexMatch "^[0-9]+(ms|s|m|h|d)?$" $retention) -}}
{{- fail (printf "audit.retention %q is not a duration (30d, 720h; 0 keeps entries)" $retention) -}}
{{- end -}}
{{- $events := toString .Values.events.retention -}}
{{- if not (regexMatch "^[0-9]+(ms|s|m|h|d)?$" $events) -}}
{{- fail (printf "events.retention %q is not a duration (7d, 168h; 0 keeps events)" $events) -}}
{{- end -}}
{{- range $k := list "timeout" "backoff" -}}
{{- $v := toString (index $.Values.webhooks $k) -}}
{{- if not (regexMatch "^[0-9]*[1-9][0-9]*(ms|s|m)?$" $v) -}}
{{- fail (printf "webhooks.%s %q is not a duration above 0 (10s, 500ms)" $k $v) -}}
{{- end -}}
{{- end -}}
{{- $attempts := toString .Values.webhooks.maxAttempts -}}
{{- if or (not (regexMatch "^[0-9]+$" $attempts)) (lt (int64 $attempts) 1) (gt (int64 $attempts) 50) -}}
{{- fail (printf "webhooks.maxAttempts %q must be 1..=50" $attempts) -}}
{{- end -}}
{{- if and .Values.tls.existingSecret (not (kindIs "string" .Values.tls.existingSecret)) -}}
{{- fail "tls.existingSecret must be the name of a kubernetes.io/tls Secret (or empty)" -}}
{{- end -}}
{{- range $k := list "idleTimeout" "sweepInterval" "startupTimeout" -}}
{{- $v := toString (index $.Values $k) -}}
{{- if not (regexMatch "^[0-9]+(ms|s|m|h)?$" $v) -}}
{{- fail (printf "%s %q is not a duration (300ms, 30s, 15m, 1h; 0 for idleTimeout)" $k $v) -}}
{{- end -}}
{{- end -}}
{{- end -}}
