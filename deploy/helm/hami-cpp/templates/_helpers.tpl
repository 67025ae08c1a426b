{{/*
Labels of every object's metadata: deploy/base's app.kubernetes.io/part-of, and Helm's two.
Pod templates and selectors do not get them, as in deploy/base.
*/}}
{{- define "hami-cpp.labels" -}}
app.kubernetes.io/part-of: hami-cpp
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/* The image holding every program: repository:tag, the tag defaulting to appVersion. */}}
{{- define "hami-cpp.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/*
device-config.yaml: files/device-config.yaml (deploy/base/config's), or with limitDelivery=env
files/env-delivery/device-config.yaml (deploy/components/env-delivery's); then
nvidia.gpuCorePolicy set to devices.nvidia.gpuCorePolicy when that is not the default.
*/}}
{{- define "hami-cpp.deviceConfig" -}}
{{- $file := ternary "files/env-delivery/device-config.yaml" "files/device-config.yaml" (eq .Values.limitDelivery "env") -}}
{{- $text := .Files.Get $file -}}
{{- $policy := .Values.devices.nvidia.gpuCorePolicy -}}
{{- if ne $policy "default" -}}
{{- $line := "(?m)^  gpuCorePolicy: default " -}}
{{- if not (regexMatch $line $text) -}}
{{- fail (printf "%s has no line '  gpuCorePolicy: default ' to set devices.nvidia.gpuCorePolicy in" $file) -}}
{{- end -}}
{{- $text = regexReplaceAll $line $text (printf "  gpuCorePolicy: %-7s " $policy) -}}
{{- end -}}
{{- $text -}}
{{- end }}

{{/*
kube-scheduler-config.yaml with the release's namespace wherever hami-system stands: the
namespace of kube-scheduler's lease, and the Service's name in the comments.
*/}}
{{- define "hami-cpp.kubeSchedulerConfig" -}}
{{- .Files.Get "files/kube-scheduler-config.yaml" | replace "hami-system" .Release.Namespace -}}
{{- end }}

{{/* Checksums of the ConfigMaps' contents, for the pod templates that mount them. */}}
{{- define "hami-cpp.deviceConfigChecksum" -}}
{{- list (include "hami-cpp.deviceConfig" .) (.Files.Get "files/config.json") | toJson | sha256sum -}}
{{- end }}

{{- define "hami-cpp.kubeSchedulerConfigChecksum" -}}
{{- include "hami-cpp.kubeSchedulerConfig" . | sha256sum -}}
{{- end }}
