{{/* STAND-IN helpers. The names are the real chart's, for release RELEASE in NAMESPACE. */}}

{{- define "gitlab.standardLabels" -}}
app.kubernetes.io/part-of: gitlab
app.kubernetes.io/managed-by: {{ .Release.Service }}
release: {{ .Release.Name }}
heritage: {{ .Release.Service }}
chart: {{ .Chart.Name }}-{{ .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "gitlab.image" -}}
{{- printf "%s/%s:v%s" .root.Values.global.image.registry .name .root.Values.global.gitlabVersion -}}
{{- end -}}

{{- define "gitlab.edition.suffix" -}}
{{- if eq .Values.global.edition "ce" }}-ce{{ else }}-ee{{ end -}}
{{- end -}}

{{/* Secret names and keys, with the real chart's defaults. */}}
{{- define "gitlab.initialRootPassword.secret" -}}
{{- default (printf "%s-gitlab-initial-root-password" .Release.Name) .Values.global.initialRootPassword.secret -}}
{{- end -}}
{{- define "gitlab.initialRootPassword.key" -}}
{{- default "password" .Values.global.initialRootPassword.key -}}
{{- end -}}
{{- define "gitlab.psql.password.secret" -}}
{{- default (printf "%s-postgresql-password" .Release.Name) .Values.global.psql.password.secret -}}
{{- end -}}
{{- define "gitlab.psql.password.key" -}}
{{- default "postgresql-password" .Values.global.psql.password.key -}}
{{- end -}}
{{- define "gitlab.redis.password.secret" -}}
{{- default (printf "%s-redis-secret" .Release.Name) .Values.global.redis.auth.secret -}}
{{- end -}}
{{- define "gitlab.redis.password.key" -}}
{{- default "secret" .Values.global.redis.auth.key -}}
{{- end -}}
{{- define "gitlab.rails-secrets.secret" -}}{{ .Release.Name }}-rails-secret{{- end -}}
{{- define "gitlab.gitaly.authToken.secret" -}}{{ .Release.Name }}-gitaly-secret{{- end -}}
{{- define "gitlab.gitlab-shell.authToken.secret" -}}{{ .Release.Name }}-gitlab-shell-secret{{- end -}}
{{- define "gitlab.workhorse.secret" -}}{{ .Release.Name }}-gitlab-workhorse-secret{{- end -}}
{{- define "gitlab.kas.secret" -}}{{ .Release.Name }}-gitlab-kas-secret{{- end -}}
{{- define "gitlab.kas.privateApi.secret" -}}{{ .Release.Name }}-kas-private-api{{- end -}}
{{- define "gitlab.kas.websocketToken.secret" -}}{{ .Release.Name }}-kas-websocket-token{{- end -}}
{{- define "gitlab.registry.certificate.secret" -}}{{ .Release.Name }}-registry-secret{{- end -}}
{{- define "gitlab.registry.httpSecret.secret" -}}{{ .Release.Name }}-registry-httpsecret{{- end -}}
{{- define "gitlab.registry.notificationSecret.secret" -}}{{ .Release.Name }}-registry-notification{{- end -}}
{{- define "gitlab.gitlab-runner.registrationToken.secret" -}}{{ .Release.Name }}-gitlab-runner-secret{{- end -}}
{{- define "gitlab.minio.credentials.secret" -}}{{ .Release.Name }}-minio-secret{{- end -}}

{{/* The object storage connection Secret of global.appConfig.object_store, as a projected source. */}}
{{- define "gitlab.appConfig.objectStorage.mountSecrets" -}}
{{- with .Values.global.appConfig.object_store }}
{{- if and .enabled .connection.secret }}
- secret:
    name: {{ .connection.secret }}
    items:
      - key: {{ default "connection" .connection.key }}
        path: objectstorage/object_store
{{- end }}
{{- end }}
{{- if and .Values.global.minio.enabled (not .Values.global.appConfig.object_store.enabled) }}
- secret:
    name: {{ include "gitlab.minio.credentials.secret" . }}
    items:
      - key: accesskey
        path: minio/accesskey
      - key: secretkey
        path: minio/secretkey
{{- end }}
{{- end -}}

{{- define "gitlab.psql.mountSecrets" -}}
- secret:
    name: {{ include "gitlab.psql.password.secret" . }}
    items:
      - key: {{ include "gitlab.psql.password.key" . }}
        path: postgres/psql-password-main
{{- end -}}

{{- define "gitlab.redis.mountSecrets" -}}
{{- if .Values.global.redis.auth.enabled }}
- secret:
    name: {{ include "gitlab.redis.password.secret" . }}
    items:
      - key: {{ include "gitlab.redis.password.key" . }}
        path: redis/redis-password
{{- end }}
{{- end -}}

{{- define "gitlab.rails.mountSecrets" -}}
- secret:
    name: {{ include "gitlab.rails-secrets.secret" . }}
    items:
      - key: secrets.yml
        path: rails-secrets/secrets.yml
- secret:
    name: {{ include "gitlab.gitlab-shell.authToken.secret" . }}
    items:
      - key: secret
        path: shell/.gitlab_shell_secret
- secret:
    name: {{ include "gitlab.gitaly.authToken.secret" . }}
    items:
      - key: token
        path: gitaly/gitaly_token
{{ include "gitlab.redis.mountSecrets" . }}
{{ include "gitlab.psql.mountSecrets" . }}
{{- if .Values.registry.enabled }}
- secret:
    name: {{ include "gitlab.registry.certificate.secret" . }}
    items:
      - key: registry-auth.key
        path: registry/gitlab-registry.key
- secret:
    name: {{ include "gitlab.registry.notificationSecret.secret" . }}
    items:
      - key: secret
        path: registry/notificationSecret
{{- end }}
{{ include "gitlab.appConfig.objectStorage.mountSecrets" . }}
{{- end -}}

