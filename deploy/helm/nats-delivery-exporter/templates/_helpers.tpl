{{/* The chart's name, or nameOverride. */}}
{{- define "nats-delivery-exporter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The objects' name: fullnameOverride, else the release's name when it holds
the chart's, else both; at most 63 characters (a label value, a Service name).
*/}}
{{- define "nats-delivery-exporter.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* What selects the exporter's pod (never changes on upgrade). */}}
{{- define "nats-delivery-exporter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "nats-delivery-exporter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: cluster-exporter
{{- end }}

{{/* Every object's labels. */}}
{{- define "nats-delivery-exporter.labels" -}}
{{ include "nats-delivery-exporter.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}
