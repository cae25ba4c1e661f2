{{/* Names, labels and the nodegate argument list shared by the templates. */}}

{{- define "nodegate.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release name alone when it already says nodegate, so that
`helm install nodegate` gives the same object names as the kustomize base. */}}
{{- define "nodegate.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "nodegate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "nodegate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "nodegate.labels" -}}
{{ include "nodegate.selectorLabels" . }}
app.kubernetes.io/part-of: nodegate
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "nodegate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "nodegate.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "nodegate.leaseNamespace" -}}
{{- default .Release.Namespace .Values.leaderElection.leaseNamespace -}}
{{- end -}}

{{- define "nodegate.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (toString (default .Chart.AppVersion .Values.image.tag)) -}}
{{- end -}}
{{- end -}}

{{/* An IPv6 bind address needs brackets before the port. */}}
{{- define "nodegate.httpAddr" -}}
{{- $a := toString .Values.http.bindAddress -}}
{{- if and (contains ":" $a) (not (hasPrefix "[" $a)) -}}
{{- printf "[%s]:%v" $a .Values.http.port -}}
{{- else -}}
{{- printf "%s:%v" $a .Values.http.port -}}
{{- end -}}
{{- end -}}

{{/* The webhook listens on the same address as the HTTP server, on its own
port. */}}
{{- define "nodegate.webhookAddr" -}}
{{- $a := toString .Values.http.bindAddress -}}
{{- if and (contains ":" $a) (not (hasPrefix "[" $a)) -}}
{{- printf "[%s]:%v" $a .Values.webhook.port -}}
{{- else -}}
{{- printf "%s:%v" $a .Values.webhook.port -}}
{{- end -}}
{{- end -}}

{{/* Where the cert-manager variant mounts the webhook's Secret. */}}
{{- define "nodegate.webhookCertDir" -}}
/etc/nodegate-webhook
{{- end -}}

{{/* Every flag is passed explicitly, defaults included, so `kubectl describe`
shows exactly what the process runs with. Built as a list and emitted with
toYaml, so values holding ': ', '#' or quotes stay one argument each. */}}
{{- define "nodegate.args" -}}
{{- $c := .Values.config -}}
{{- $a := list "run" -}}
{{- range $c.taints }}{{ $a = append $a (printf "--taint=%s" .) }}{{ end -}}
{{- $a = append $a (printf "--autoscaler=%s" (join "," $c.autoscalers)) -}}
{{- range $c.taintFor }}{{ $a = append $a (printf "--taint-for=%s" .) }}{{ end -}}
{{- range $c.transientTaints }}{{ $a = append $a (printf "--transient-taint=%s" .) }}{{ end -}}
{{- with $c.daemonsetNamespaces }}{{ $a = append $a (printf "--daemonset-namespaces=%s" (join "," (uniq (append . $.Release.Namespace)))) }}{{ end -}}
{{- range $c.exclude }}{{ $a = append $a (printf "--exclude=%s" .) }}{{ end -}}
{{- with $c.excludeSelector }}{{ $a = append $a (printf "--exclude-selector=%s" .) }}{{ end -}}
{{- with $c.managedNodeSelector }}{{ $a = append $a (printf "--node-selector=%s" .) }}{{ end -}}
{{- if include "nodegate.configFile" . }}{{ $a = append $a "--config=/etc/nodegate/config.yaml" }}{{ end -}}
{{- $a = append $a (printf "--timeout=%v" $c.timeout) -}}
{{- $a = append $a (printf "--schedule-timeout=%v" $c.scheduleTimeout) -}}
{{- $a = append $a (printf "--on-timeout=%v" $c.onTimeout) -}}
{{- if eq (toString $c.onTimeout) "replace" -}}
{{- $a = append $a (printf "--replace-budget=%v" $c.replaceBudget) -}}
{{- $a = append $a (printf "--replace-interval=%v" $c.replaceInterval) -}}
{{- $a = append $a (printf "--replace-in-flight=%v" $c.replaceInFlight) -}}
{{- $a = append $a (printf "--replace-fallback=%v" $c.replaceFallback) -}}
{{- $a = append $a (printf "--replace-breakage=%v" $c.replaceBreakage) -}}
{{- end -}}
{{- if $c.dryRun }}{{ $a = append $a "--dry-run" }}{{ end -}}
{{- if $c.nodeCondition }}{{ $a = append $a "--node-condition" }}{{ end -}}
{{- $a = append $a (printf "--max-concurrent-patches=%v" $c.maxConcurrentPatches) -}}
{{- $a = append $a (printf "--kube-qps=%v" $c.kubeQps) -}}
{{- $a = append $a (printf "--kube-burst=%v" $c.kubeBurst) -}}
{{- $a = append $a (printf "--kube-request-timeout=%v" $c.kubeRequestTimeout) -}}
{{- $a = append $a (printf "--worker-threads=%v" $c.workerThreads) -}}
{{- $a = append $a (printf "--log-format=%v" $c.logFormat) -}}
{{- $a = append $a (printf "--log-level=%v" $c.logLevel) -}}
{{- with .Values.leaderElection -}}
{{- if .enabled -}}
{{- $a = append $a "--leader-elect" -}}
{{- $a = append $a (printf "--lease-name=%v" .leaseName) -}}
{{- $a = append $a (printf "--lease-namespace=%s" (include "nodegate.leaseNamespace" $)) -}}
{{- $a = append $a (printf "--lease-duration=%v" .leaseDuration) -}}
{{- $a = append $a (printf "--renew-deadline=%v" .renewDeadline) -}}
{{- $a = append $a (printf "--retry-period=%v" .retryPeriod) -}}
{{- end -}}
{{- end -}}
{{- $a = append $a (printf "--http-addr=%s" (include "nodegate.httpAddr" .)) -}}
{{- $a = append $a (printf "--debug-addr=%s" (toString .Values.http.debugAddr)) -}}
{{- $a = append $a (printf "--debug-history=%v" .Values.http.debugHistory) -}}
{{- if .Values.http.dropNodeMetrics }}{{ $a = append $a "--drop-node-metrics" }}{{ end -}}
{{- with .Values.tracing -}}
{{- if .otlpEndpoint }}{{ $a = append $a (printf "--otlp-endpoint=%s" .otlpEndpoint) }}{{ end -}}
{{- end -}}
{{- if and (eq (include "nodegate.admission" .) "policy") (not $c.dryRun) -}}
{{- $a = append $a (printf "--admission-params=%s-admission" (include "nodegate.fullname" .)) -}}
{{- end -}}
{{- with .Values.webhook -}}
{{- if eq (include "nodegate.admission" $) "webhook" -}}
{{- $fullname := include "nodegate.fullname" $ -}}
{{- $a = append $a (printf "--webhook-addr=%s" (include "nodegate.webhookAddr" $)) -}}
{{- if .certManager.enabled -}}
{{- $a = append $a (printf "--webhook-cert-dir=%s" (include "nodegate.webhookCertDir" $)) -}}
{{- else -}}
{{- $a = append $a (printf "--webhook-cert-secret=%s/%s-webhook-tls" $.Release.Namespace $fullname) -}}
{{- $a = append $a (printf "--webhook-configuration=%s" $fullname) -}}
{{- $a = append $a (printf "--webhook-host=%s-webhook.%s.svc" $fullname $.Release.Namespace) -}}
{{- range .extraHosts }}{{ $a = append $a (printf "--webhook-host=%s" .) }}{{ end -}}
{{- $a = append $a (printf "--webhook-cert-validity=%v" .certValidity) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if $c.taintNewNodes }}{{ $a = append $a "--taint-new-nodes" }}{{ end -}}
{{- $a = append $a (printf "--new-node-window=%v" $c.newNodeWindow) -}}
{{- $a = append $a (printf "--max-unavailable=%v" $c.maxUnavailable) -}}
{{- if ne (toString $c.regateAfter) "0" -}}
{{- $a = append $a (printf "--regate-after=%v" $c.regateAfter) -}}
{{- $a = append $a (printf "--regate-taint=%v" $c.regateTaint) -}}
{{- $a = append $a (printf "--regate-timeout=%v" $c.regateTimeout) -}}
{{- $a = append $a (printf "--regate-max-unavailable=%v" $c.regateMaxUnavailable) -}}
{{- if $c.regateOnReboot }}{{ $a = append $a "--regate-on-reboot" }}{{ end -}}
{{- if $c.regateAllowNoExecute }}{{ $a = append $a "--regate-allow-no-execute" }}{{ end -}}
{{- with $c.rebootAnnouncements -}}
{{- $a = append $a (printf "--reboot-announcements=%s" (join "," .)) -}}
{{- $a = append $a (printf "--kured-daemonset=%v" $c.kuredDaemonset) -}}
{{- $a = append $a (printf "--kured-max-holders=%v" $c.kuredMaxHolders) -}}
{{- $a = append $a (printf "--reboot-timeout=%v" $c.rebootTimeout) -}}
{{- end -}}
{{- end -}}
{{- range .Values.extraArgs }}{{ $a = append $a (toString .) }}{{ end -}}
{{- toYaml $a -}}
{{- end -}}

{{/* How the startup taint is put on at Node CREATE: policy, webhook or none.
`admission` empty picks policy when the API server serves
MutatingAdmissionPolicy in admissionregistration.k8s.io/v1 (Kubernetes 1.36+),
else webhook. `helm template` knows only what --api-versions and
--kube-version tell it. */}}
{{- define "nodegate.admission" -}}
{{- $mode := toString (.Values.admission | default "") -}}
{{- if eq $mode "" -}}
{{- if .Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy" -}}
policy
{{- else -}}
webhook
{{- end -}}
{{- else if has $mode (list "policy" "webhook" "none") -}}
{{- $mode -}}
{{- else -}}
{{- fail (printf "admission must be policy, webhook or none (or empty: policy where the API server serves MutatingAdmissionPolicy), got %q" $mode) -}}
{{- end -}}
{{- end -}}

{{/* A managed taint KEY[:EFFECT] as KEY:EFFECT (NoSchedule when no effect is
given, as nodegate's --taint does). */}}
{{- define "nodegate.taintKeyEffect" -}}
{{- if contains ":" . -}}{{ . }}{{- else -}}{{ printf "%s:NoSchedule" . }}{{- end -}}
{{- end -}}

{{/* Whether the API server serves ValidatingAdmissionPolicy in
admissionregistration.k8s.io/v1 (Kubernetes 1.30+): asked of the API server
by `helm install`; `helm template` knows only what --api-versions and
--kube-version tell it. */}}
{{- define "nodegate.vapServed" -}}
{{- if or (.Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy") (semverCompare ">=1.30.0-0" .Capabilities.KubeVersion.Version) -}}
true
{{- end -}}
{{- end -}}

{{/* Whether the chart writes a config file: only for what has no flag. */}}
{{- define "nodegate.configFile" -}}
{{- $c := .Values.config -}}
{{- if or $c.criticalPods $c.conditionTaints $c.criticalConditions $c.criticalResources $c.draDrivers $c.suspend $c.canary.enabled -}}
true
{{- end -}}
{{- end -}}

{{/* The startup-taint rules, one a line, SELECTOR=KEY:EFFECT, in the order
nodegate applies them (src/settings, actors/core/src/startup.rs): the
config.taintFor rules, then each preset of config.autoscalers once (auto is
karpenter, gke, aks, eks), the cluster-autoscaler catch-all last. The
admission policy's CEL reads them from its parameter ConfigMap. */}}
{{- define "nodegate.startupRules" -}}
{{- $ca := "startup-taint.cluster-autoscaler.kubernetes.io/nodegate:NoSchedule" -}}
{{- $rules := dict "karpenter" "karpenter.sh/nodepool=readiness.k8s.io/nodegate:NoSchedule" "gke" (printf "cloud.google.com/gke-nodepool=%s" $ca) "aks" (printf "kubernetes.azure.com/agentpool=%s" $ca) "eks" (printf "eks.amazonaws.com/nodegroup=%s" $ca) -}}
{{- $names := list -}}
{{- range .Values.config.autoscalers -}}
{{- range splitList "," . -}}
{{- $n := lower (trim .) -}}
{{- if eq $n "auto" -}}{{- $names = concat $names (list "karpenter" "gke" "aks" "eks") -}}
{{- else if $n -}}{{- $names = append $names $n -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- range .Values.config.taintFor }}
{{ regexReplaceAll "^(.*)=([^=]*)$" . "${1}" }}={{ include "nodegate.taintKeyEffect" (regexReplaceAll "^(.*)=([^=]*)$" . "${2}" | trim) }}
{{- end -}}
{{- range uniq $names -}}
{{- if hasKey $rules . }}
{{ get $rules . }}
{{- end -}}
{{- end -}}
{{- if has "cluster-autoscaler" $names }}
={{ $ca }}
{{- end -}}
{{- end -}}
