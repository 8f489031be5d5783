{{/* The name every object of the release is named after: the release name, or fullnameOverride. */}}
{{- define "kubewasm.fullname" -}}
{{- default .Release.Name .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every object: kustomize's (deploy/base: part-of) and Helm's standard ones. */}}
{{- define "kubewasm.labels" -}}
app.kubernetes.io/part-of: kubewasm
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The host's pods: the Deployment's selector, the Service's and the ServiceMonitor's. */}}
{{- define "kubewasm.selectorLabels" -}}
app.kubernetes.io/name: kubewasm
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The user name prefix of every plugin identity: ServiceAccount kubewasm-plugin-<name> in the
host's namespace (--impersonate-plugins; crates/host/src/identity.rs names them). */}}
{{- define "kubewasm.pluginUserPrefix" -}}
system:serviceaccount:{{ .Release.Namespace }}:kubewasm-plugin-
{{- end -}}

{{/* The operator configs of plugin files, as the ConfigMap holds them (its checksum rolls the pods). */}}
{{- define "kubewasm.pluginConfigs" -}}
{{- range $name, $config := .Values.pluginFiles.configs }}
{{ $name }}.yaml: |
{{- toYaml $config | nindent 2 }}
{{- end }}
{{- end -}}
