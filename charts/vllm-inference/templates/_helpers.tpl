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
Labels on every object: the same set `deployctl render` writes (orchestrator/render/manifests.py), so
the two renders compare equal. Hence managed-by is deployctl and there is no helm.sh/chart
label. Ours win over commonLabels: a user label must not change what the selectors match.
*/}}
{{- define "vllm-inference.labels" -}}
{{- $ours := dict
  "app.kubernetes.io/component" "inference-server"
  "app.kubernetes.io/part-of" "llm-inference"
  "app.kubernetes.io/managed-by" "deployctl"
  "app.kubernetes.io/version" .Values.engine.version
  "deployctl.dev/release" (include "vllm-inference.fullname" .)
}}
{{- merge $ours (include "vllm-inference.selectorLabels" . | fromYaml) .Values.commonLabels | toYaml }}
{{- end }}

{{/*
The pod spec every copy's pods share: the Deployment's pod, a RayCluster's head and workers, a
LeaderWorkerSet's leader and workers (manifests/_pod.j2 renders the same). Called with a dict:
root (the chart's top context), command, args, serves (the pod serves the API: port and
probes), affinity.
*/}}
{{- define "vllm-inference.podSpec" -}}
{{- $v := .root.Values -}}
serviceAccountName: {{ include "vllm-inference.fullname" .root | quote }}
{{- /* Service links would put VLLM_PORT=tcp://… into the pods of a Service named "vllm",
       and vLLM reads VLLM_PORT as its own setting and refuses to start. */}}
enableServiceLinks: false
terminationGracePeriodSeconds: {{ $v.terminationGracePeriodSeconds | toJson }}
securityContext:
  {{- toYaml $v.podSecurityContext | nindent 2 }}
{{- with $v.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.priorityClassName }}
priorityClassName: {{ . | quote }}
{{- end }}
{{- with $v.runtimeClassName }}
runtimeClassName: {{ . | quote }}
{{- end }}
{{- with $v.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
containers:
- name: vllm
  image: {{ $v.image.reference | quote }}
  imagePullPolicy: {{ $v.image.pullPolicy | quote }}
  {{- with .command }}
  command:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .args }}
  args:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  env:
    {{- toYaml (concat $v.server.env $v.extraEnv) | nindent 4 }}
  {{- with $v.envFrom }}
  envFrom:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- if .serves }}
  ports:
  - name: http
    containerPort: {{ $v.server.port | toJson }}
    protocol: TCP
  {{- end }}
  resources:
    {{- toYaml $v.resources | nindent 4 }}
  securityContext:
    {{- toYaml $v.securityContext | nindent 4 }}
  {{- if .serves }}
  startupProbe:
    {{- toYaml $v.startupProbe | nindent 4 }}
  readinessProbe:
    {{- toYaml $v.readinessProbe | nindent 4 }}
  livenessProbe:
    {{- toYaml $v.livenessProbe | nindent 4 }}
  {{- end }}
  volumeMounts:
  - name: model
    mountPath: {{ $v.model.mountPath | quote }}
    readOnly: true
  - name: dshm
    mountPath: /dev/shm
  {{- /* HOME for a uid the image does not know: caches of torch.compile, Triton, FlashInfer. */}}
  - name: home
    mountPath: /home/vllm
  {{- with $v.extraVolumeMounts }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
volumes:
- name: model
  {{- if $v.model.claimName }}
  persistentVolumeClaim:
    claimName: {{ $v.model.claimName | quote }}
    readOnly: true
  {{- else }}
  hostPath:
    path: {{ required "set model.claimName or model.hostPath: where the weights are" $v.model.hostPath | quote }}
    type: Directory
  {{- end }}
{{- /* NCCL moves tensors between the pod's GPUs through /dev/shm; the runtime's 64 MiB default is far too small. */}}
- name: dshm
  emptyDir:
    medium: Memory
    sizeLimit: {{ $v.shmSizeLimit | quote }}
- name: home
  emptyDir: {}
{{- with $v.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end }}
