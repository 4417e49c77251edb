{{/*
Names. Every object is "<fullname>-<component>" (fullname defaults to the release name, or "migctl" when the
release is called migctl), so two releases never collide on cluster-scoped objects.
*/}}
{{- define "migctl.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "migctl.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* "<fullname>-<component>"; call with (list $ "controller") */}}
{{- define "migctl.componentName" -}}
{{- $root := index . 0 -}}
{{- printf "%s-%s" (include "migctl.fullname" $root) (index . 1) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "migctl.labels" -}}
{{- $root := index . 0 -}}
helm.sh/chart: {{ printf "%s-%s" $root.Chart.Name $root.Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "migctl.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/version: {{ $root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ $root.Release.Service }}
app.kubernetes.io/component: {{ index . 1 }}
app.kubernetes.io/part-of: migctl
{{- end -}}

{{- define "migctl.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "migctl.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "migctl.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}
{{- end -}}

{{/*
The controller's effective Config (migctl.config.Config) as a dict: the `config:` values with the chart's
namespace defaults filled in where the values leave them unset. Values always win.
*/}}
{{- define "migctl.config" -}}
{{- $ns := .Values.gpuOperator.namespace -}}
{{- $defaults := dict
      "gpu_operator" (dict "configmap_namespace" $ns)
      "controller" (dict
        "configmap_namespace" $ns
        "leader_election" (dict "lease_namespace" .Release.Namespace)) -}}
{{- $cfg := mergeOverwrite (deepCopy $defaults) (deepCopy .Values.config) -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/* The controller's metrics port, read from the rendered config (so probes, Service and config agree). */}}
{{- define "migctl.controller.metricsPort" -}}
{{- $cfg := include "migctl.config" . | fromYaml -}}
{{- $ctl := $cfg.controller | default dict -}}
{{- if hasKey $ctl "metrics_port" -}}
{{- if not $ctl.metrics_port -}}
{{- fail "config.controller.metrics_port must be a fixed port (not null or 0): the chart's probes, Service and ServiceMonitor use it" -}}
{{- end -}}
{{- $ctl.metrics_port -}}
{{- else -}}
8080
{{- end -}}
{{- end -}}

{{/* The agent's health port, read from config.agent (null turns the probes off). */}}
{{- define "migctl.agent.healthPort" -}}
{{- $a := (include "migctl.config" . | fromYaml).agent | default dict -}}
{{- if hasKey $a "health_port" -}}
{{- if $a.health_port -}}{{ $a.health_port }}{{- end -}}
{{- else -}}
8081
{{- end -}}
{{- end -}}

{{- define "migctl.controller.serviceAccountName" -}}{{ include "migctl.componentName" (list . "controller") }}{{- end -}}
{{- define "migctl.agent.serviceAccountName" -}}{{ include "migctl.componentName" (list . "agent") }}{{- end -}}
{{- define "migctl.fallback.serviceAccountName" -}}{{ include "migctl.componentName" (list . "fallback") }}{{- end -}}
{{/* For templates/webhook.yaml (issue 9): the webhook's ServiceAccount, bound by templates/webhook-rbac.yaml. */}}
{{- define "migctl.webhook.serviceAccountName" -}}{{ include "migctl.componentName" (list . "webhook") }}{{- end -}}

{{/* Pod- and container-level security shared by every component (values: podSecurityContext, securityContext). */}}
{{- define "migctl.podSecurityContext" -}}
{{- toYaml .Values.podSecurityContext -}}
{{- end -}}
{{- define "migctl.securityContext" -}}
{{- toYaml .Values.securityContext -}}
{{- end -}}

{{/* CEL for a ValidatingAdmissionPolicy: the field (a path below object, e.g. "status.phase") is as it was, absent
included. Call with the path string. */}}
{{- define "migctl.unchanged" -}}
(has(object.{{ . }}) ? (has(oldObject.{{ . }}) && object.{{ . }} == oldObject.{{ . }}) : !has(oldObject.{{ . }}))
{{- end -}}
