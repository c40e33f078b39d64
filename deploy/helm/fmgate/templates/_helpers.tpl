{{- define "fmgate.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "fmgate.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "fmgate.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "fmgate.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "fmgate.secretName" -}}
{{- .Values.secrets.existingSecret | default (include "fmgate.fullname" .) -}}
{{- end -}}

{{- define "fmgate.hasSecret" -}}
{{- if or .Values.secrets.existingSecret .Values.secrets.env -}}true{{- end -}}
{{- end -}}

{{/* The config file: the values' config with what the chart decides set over it. */}}
{{- define "fmgate.config" -}}
{{- $cfg := deepCopy (.Values.config | default dict) -}}
{{- $auth := get $cfg "auth" | default dict -}}
{{- if get $auth "keys" -}}
{{- fail "config.auth.keys holds bearer keys, which are secrets: do not put them in the ConfigMap" -}}
{{- end -}}
{{- $server := get $cfg "server" | default dict -}}
{{- $_ := set $server "addr" (printf "0.0.0.0:%d" (int .Values.gateway.port)) -}}
{{- $_ := set $server "drainTimeout" (printf "%ds" (int .Values.gateway.drainTimeoutSeconds)) -}}
{{- $_ := set $cfg "server" $server -}}
{{- $events := get $cfg "events" | default dict -}}
{{- $wal := get $events "wal" | default dict -}}
{{- $_ := set $wal "dir" "/var/lib/fmgate/wal" -}}
{{- $_ := set $events "wal" $wal -}}
{{- if .Values.nats.url -}}
{{- $sinks := get $events "sinks" | default dict -}}
{{- $nats := get $sinks "nats" | default dict -}}
{{- $_ := set $nats "url" .Values.nats.url -}}
{{- $_ := set $sinks "nats" $nats -}}
{{- $_ := set $events "sinks" $sinks -}}
{{- end -}}
{{- $_ := set $cfg "events" $events -}}
{{- $store := get $cfg "eventStore" | default dict -}}
{{- if .Values.postgres.dsn -}}
{{- $_ := set $store "driver" "postgres" -}}
{{- $_ := set $store "dsn" .Values.postgres.dsn -}}
{{- else -}}
{{- $_ := set $store "path" "/var/lib/fmgate/events.db" -}}
{{- end -}}
{{- $_ := set $cfg "eventStore" $store -}}
{{- if .Values.redis.address -}}
{{- $fleet := get $cfg "fleet" | default dict -}}
{{- $_ := set $fleet "redis" .Values.redis.address -}}
{{- $size := .Values.gateway.replicas -}}
{{- if .Values.gateway.autoscaling.enabled -}}{{- $size = .Values.gateway.autoscaling.minReplicas -}}{{- end -}}
{{- $_ := set $fleet "size" (int $size) -}}
{{- $_ := set $cfg "fleet" $fleet -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/* Environment variables every fmgate container gets from the Secret. */}}
{{- define "fmgate.secretEnv" -}}
{{- if include "fmgate.hasSecret" . }}
{{- $secret := include "fmgate.secretName" . }}
{{- $names := list "FMGATE_ADMIN_TOKEN" "FMGATE_HASH_SECRET" "FMGATE_REDIS_PASSWORD" "FMGATE_PG_DSN" "PGPASSWORD" "AWS_ACCESS_KEY_ID" "AWS_SECRET_ACCESS_KEY" "AWS_SESSION_TOKEN" }}
{{- $required := list }}
{{- range (.Values.config.models | default list) }}
{{- if .apiKeyEnv }}{{- $required = append $required .apiKeyEnv }}{{- end }}
{{- end }}
{{- range $k, $c := (dig "auth" "keys" dict (.Values.config | default dict)) }}
{{- if $c.secretKeyEnv }}{{- $required = append $required $c.secretKeyEnv }}{{- end }}
{{- end }}
{{- range $required | uniq }}
- name: {{ . }}
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ . }}
{{- end }}
{{- range $names }}
{{- if not (has . $required) }}
- name: {{ . }}
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ . }}
      optional: true
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{- define "fmgate.securityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}
