{{- define "gitlab-runner.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "gitlab-runner.secret" -}}
{{- default (include "gitlab-runner.fullname" .) .Values.runners.secret | quote -}}
{{- end -}}

{{- define "gitlab-runner.image" -}}
{{- $tag := default (printf "alpine-v%s" .Chart.AppVersion) .Values.image.tag -}}
{{- printf "%s/%s:%s" .Values.image.registry .Values.image.image $tag -}}
{{- end -}}

{{- define "gitlab-runner.labels" -}}
app: {{ include "gitlab-runner.fullname" . }}
chart: {{ .Chart.Name }}-{{ .Chart.Version | replace "+" "_" }}
release: {{ .Release.Name | quote }}
heritage: {{ .Release.Service | quote }}
{{- end -}}
