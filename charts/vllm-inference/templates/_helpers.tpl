{{/*
The chart's name, for app.kubernetes.io/name.
*/}}
{{- define "vllm-inference.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The name of every object. deployctl sets fullnameOverride to the profile's metadata.name;
otherwise the `helm create` rule: the release name, with the chart name unless it has it.
*/}}
{{- define "vllm-inference.fullname" -}}
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

{{/*
Selector labels: never the version, since a Deployment's selector cannot change.
*/}}
{{- define "vllm-inference.selectorLabels" -}}
app.kubernetes.io/name: {{ include "vllm-inference.name" . | quote }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- end }}

{{/*
Labels on every object: the same set `deployctl render` writes (orchestrator/render.py), so
the two renders compare equal. Hence managed-by is deployctl and there is no helm.sh/chart
label. Ours win over commonLabels: a user label must not change what the selectors match.
*/}}
{{- define "vllm-inference.labels" -}}
{{- $ours := dict
  "app.kubernetes.io/component" "inference-server"
  "app.kubernetes.io/part-of" "llm-inference"
  "app.kubernetes.io/managed-by" "deployctl"
  "app.kubernetes.io/version" .Values.vllmVersion
  "deployctl.dev/release" (include "vllm-inference.fullname" .)
}}
{{- merge $ours (include "vllm-inference.selectorLabels" . | fromYaml) .Values.commonLabels | toYaml }}
{{- end }}
