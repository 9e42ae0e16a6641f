{{/*
meshfit.image: the meshfit container's image, repository:tag (the tag defaults to the chart's appVersion).
*/}}
{{- define "meshfit.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/*
meshfit.schedulerImage: the second kube-scheduler's image.
*/}}
{{- define "meshfit.schedulerImage" -}}
{{ .Values.scheduler.image.repository }}:{{ .Values.scheduler.image.tag }}
{{- end -}}

{{/*
meshfit.url: the extender's URL prefix as kube-scheduler calls it (https with mtls).
*/}}
{{- define "meshfit.url" -}}
{{ if .Values.mtls.enabled }}https{{ else }}http{{ end }}://meshfit.{{ .Release.Namespace }}.svc:8888/scheduler
{{- end -}}
