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
{{- /* agent.dra comes from the top-level dra: block only, so the agent's settings and its RBAC agree */ -}}
{{- if hasKey ($cfg.agent | default dict) "dra" -}}
{{- fail "set the top-level dra: block (enabled, pluginNamespace, pluginLabels), not config.agent.dra: the chart derives it, and the agent's RBAC, from dra:" -}}
{{- end -}}
{{- with .Values.dra -}}{{- if .enabled -}}
{{- $_ := set $cfg "agent" (mergeOverwrite ($cfg.agent | default dict) (dict "dra" (dict "enabled" true "plugin_namespace" .pluginNamespace "plugin_labels" .pluginLabels))) -}}
{{- end -}}{{- end -}}
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

{{/* An alert's `for:` line (empty when it has none): controller.prometheusRule.customRules.<alert>.for, else the
chart's. Call with (list $ "<Alert>" "<default for>"). */}}
{{- define "migctl.alertFor" -}}
{{- $custom := index ((index . 0).Values.controller.prometheusRule.customRules | default dict) (index . 1) | default dict -}}
{{- with ($custom.for | default (index . 2)) }}for: {{ . }}{{ end -}}
{{- end -}}

{{/* An alert's labels: its severity (customRules.<alert>.severity, else the chart's), customRules.<alert>.labels,
then additionalRuleLabels; the first wins on a clash. Call with (list $ "<Alert>" "<default severity>"). */}}
{{- define "migctl.alertLabels" -}}
{{- $rule := (index . 0).Values.controller.prometheusRule -}}
{{- $custom := index ($rule.customRules | default dict) (index . 1) | default dict -}}
{{- $severity := dict "severity" ($custom.severity | default (index . 2)) -}}
{{- toYaml (merge $severity (deepCopy ($custom.labels | default dict)) (deepCopy ($rule.additionalRuleLabels | default dict))) -}}
{{- end -}}


{{/* A component's metrics port, read from config.<section>.metrics_port (default 8080; null or 0 fails: the probes,
the Service and the ServiceMonitor need a fixed port). Call with (list $ "fallback"). */}}
{{- define "migctl.metricsPort" -}}
{{- $section := index . 1 -}}
{{- $s := index (include "migctl.config" (index . 0) | fromYaml) $section | default dict -}}
{{- if hasKey $s "metrics_port" -}}
{{- if not $s.metrics_port -}}
{{- fail (printf "config.%s.metrics_port must be a fixed port (not null or 0): the chart's probes, Service and ServiceMonitor use it" $section) -}}
{{- end -}}
{{- $s.metrics_port -}}
{{- else -}}
8080
{{- end -}}
{{- end -}}

{{/* The label on every metrics Service: servicemonitor.yaml selects on it. */}}
{{- define "migctl.metricsLabel" -}}
migctl.io/metrics: "true"
{{- end -}}

{{/* A headless Service in front of one component's metrics port, for the ServiceMonitor (or any Prometheus that
discovers Endpoints). Call with (list $ "<component>" <port> "<container port name>"). */}}
{{- define "migctl.metricsService" -}}
{{- $root := index . 0 -}}
{{- $component := index . 1 -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "migctl.componentName" (list $root (printf "%s-metrics" $component)) }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "migctl.labels" (list $root $component) | nindent 4 }}
    {{- include "migctl.metricsLabel" $root | nindent 4 }}
spec:
  clusterIP: None
  selector:
    {{- include "migctl.selectorLabels" (list $root $component) | nindent 4 }}
  ports:
    - name: metrics
      port: {{ index . 2 }}
      targetPort: {{ index . 3 }}
      protocol: TCP
{{- end -}}

{{/* The agents' tolerations: agent.tolerations (the defaults) followed by agent.extraTolerations. */}}
{{- define "migctl.agent.tolerations" -}}
{{- $all := concat (.Values.agent.tolerations | default list) (.Values.agent.extraTolerations | default list) -}}
{{- with $all }}{{ toYaml . }}{{ end -}}
{{- end -}}
