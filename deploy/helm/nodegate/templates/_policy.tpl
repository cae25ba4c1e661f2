{{/* Who the admission policies hold (deploy/kustomize/base/admissionpolicy.yaml
explains it): the ServiceAccounts named by a labelled ClusterRoleBinding of one
of nodegate's ClusterRoles. The list of those roles as CEL, and the
matchCondition built on it; rendered alike for every policy. */}}
{{- define "nodegate.policyRoles" -}}
{{- $f := include "nodegate.fullname" . -}}
['{{ $f }}', '{{ $f }}-node-condition', '{{ $f }}-webhook-certs', '{{ $f }}-replace']
{{- end -}}

{{- define "nodegate.policySubject" -}}
params.roleRef.kind == 'ClusterRole' &&
{{ include "nodegate.policyRoles" . }}.exists(r,
params.roleRef.name == r || params.roleRef.name.endsWith('-' + r)) &&
has(params.subjects) && params.subjects.exists(s, s.kind == 'ServiceAccount' &&
request.userInfo.username == 'system:serviceaccount:' + s.namespace + ':' + s.name)
{{- end -}}

{{/* Every role the chart binds, for nodegate-role-bindings. */}}
{{- define "nodegate.allRoles" -}}
{{- $f := include "nodegate.fullname" . -}}
['{{ $f }}', '{{ $f }}-node-condition', '{{ $f }}-webhook-certs', '{{ $f }}-replace',
'{{ $f }}-canary', '{{ $f }}-leader-election', '{{ $f }}-events']
{{- end -}}

{{/* The ClusterRoles whose bindings must carry the policy-subject label. */}}
{{- define "nodegate.heldRoles" -}}
{{- $f := include "nodegate.fullname" . -}}
['{{ $f }}', '{{ $f }}-node-condition', '{{ $f }}-webhook-certs', '{{ $f }}-replace']
{{- end -}}

{{/* The taint keys outside nodegate.dev/ that nodegate adds and removes: the
two the --autoscaler presets may choose and each config.taintFor key, as a
CEL list. */}}
{{- define "nodegate.ownTaintKeys" -}}
{{- $own := list "readiness.k8s.io/nodegate" "startup-taint.cluster-autoscaler.kubernetes.io/nodegate" }}
{{- range .Values.config.taintFor }}
{{- $key := first (splitList ":" (regexReplaceAll "^(.*)=([^=]*)$" . "${2}" | trim)) }}
{{- if not (hasPrefix "nodegate.dev/" $key) }}{{ $own = append $own $key }}{{ end }}
{{- end }}
{{- uniq $own | toJson }}
{{- end -}}
