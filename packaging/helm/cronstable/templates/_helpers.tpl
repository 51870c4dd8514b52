{{- define "cronstable.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "cronstable.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "cronstable.selectorLabels" -}}
app.kubernetes.io/name: {{ include "cronstable.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "cronstable.labels" -}}
{{ include "cronstable.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "cronstable.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "cronstable.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "cronstable.deployKeySecret" -}}
{{- default (printf "%s-deploy-key" (include "cronstable.fullname" .)) .Values.source.git.deployKey.existingSecret -}}
{{- end -}}

{{- define "cronstable.gitSpec" -}}
{{- $git := .Values.source.git -}}
{{- $url := required "source.git.url is required with source.type git" $git.url -}}
{{- printf "git+%s?ref=%s&interval=%v" $url $git.ref $git.interval -}}
{{- if $git.path }}{{ printf "&path=%s" $git.path }}{{ end -}}
{{- end -}}
