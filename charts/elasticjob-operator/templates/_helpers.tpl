{{/*
Names and labels shared by every template (templates/rbac.yaml uses them too).
*/}}

{{/* The chart name, or nameOverride. */}}
{{- define "elasticjob-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name of this release's resources: fullnameOverride, or <release>-<name> (just <release>
when it already contains the name), cut to the 63 characters a DNS label allows.
*/}}
{{- define "elasticjob-operator.fullname" -}}
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

{{/* chart label value: name-version. */}}
{{- define "elasticjob-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels that select the operator's pods; never change them in an upgrade. */}}
{{- define "elasticjob-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "elasticjob-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/* Labels on every object of the release. */}}
{{- define "elasticjob-operator.labels" -}}
helm.sh/chart: {{ include "elasticjob-operator.chart" . }}
{{ include "elasticjob-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: elasticjob
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The ServiceAccount the operator runs as. */}}
{{- define "elasticjob-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "elasticjob-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The operator image: repository@digest when a digest is set, else repository:tag. */}}
{{- define "elasticjob-operator.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Name of the metrics Service (also what the helm test and NOTES.txt point at). */}}
{{- define "elasticjob-operator.metricsServiceName" -}}
{{- printf "%s-metrics" (include "elasticjob-operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* "cluster-wide" or the comma-separated watched namespaces, for NOTES.txt and the test. */}}
{{- define "elasticjob-operator.watchMode" -}}
{{- if .Values.watchNamespaces }}
{{- join "," .Values.watchNamespaces }}
{{- else }}
{{- "cluster-wide" }}
{{- end }}
{{- end }}

{{/*
A label map as "k=v,k=v" (the operator's label settings).
*/}}
{{- define "elasticjob-operator.labelList" -}}
{{- $items := list }}
{{- range $k, $v := . }}
{{- $items = append $items (printf "%s=%s" $k $v) }}
{{- end }}
{{- join "," $items }}
{{- end }}
