{{/* Names, labels and the values the templates share. */}}

{{- define "so.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* "<release>-<chart>", or the release name when it already contains the chart's name. */}}
{{- define "so.fullname" -}}
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

{{- define "so.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "so.selectorLabels" -}}
app.kubernetes.io/name: {{ include "so.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "so.labels" -}}
helm.sh/chart: {{ include "so.chart" . }}
{{ include "so.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: sandbox-orchestrator
{{- end -}}

{{- define "so.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "so.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "so.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The sandbox namespace, refused when it is the release's own (its default-deny policy would cut the
     controller off, and the controller's pod would fall under the sandboxes' rules). */}}
{{- define "so.sandboxNamespace" -}}
{{- $ns := .Values.sandboxNamespace.name -}}
{{- if eq $ns .Release.Namespace -}}
{{- fail (printf "sandboxNamespace.name (%s) must differ from the release namespace" $ns) -}}
{{- end -}}
{{- $ns -}}
{{- end -}}

{{- define "so.stateDir" -}}/var/lib/sandbox-orchestrator{{- end -}}
{{- define "so.configDir" -}}/etc/sandbox-orchestrator{{- end -}}
{{- define "so.profilesDir" -}}/etc/sandbox-orchestrator/profiles{{- end -}}

{{- define "so.stateClaim" -}}
{{- default (printf "%s-state" (include "so.fullname" .)) .Values.state.persistence.existingClaim -}}
{{- end -}}

{{- define "so.controllerWorkspaceClaim" -}}
{{- default (printf "%s-workspaces" (include "so.fullname" .)) .Values.workspaces.claims.controller -}}
{{- end -}}

{{/* PersistentVolumes are cluster-scoped: their names carry the release namespace. */}}
{{- define "so.hostPathPVPrefix" -}}
{{- printf "%s-%s" .Release.Namespace (include "so.fullname" .) | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- define "so.workspaceOwner" -}}
{{- default (printf "%d:%d" (int .Values.controller.runAsUser) (int .Values.controller.runAsGroup)) .Values.workspaces.owner -}}
{{- end -}}

{{- define "so.customProfiles" -}}
{{- if or .Values.profiles.custom .Values.profiles.seccomp .Values.ci.profile -}}true{{- end -}}
{{- end -}}

{{/* The token entries with their Secret keys (default: the subject), checked for duplicates. */}}
{{- define "so.tokenKey" -}}
{{- default .subject .key -}}
{{- end -}}

{{- define "so.tokenSecretName" -}}
{{- default (printf "%s-tokens" (include "so.fullname" .)) .Values.tokens.existingSecret -}}
{{- end -}}

{{/* The controller's config.yaml. The service's tokens, workspaces and the backend come from the chart;
     the rest is the config section of the values, in the controller's own syntax. The config's rules are
     the models' (values.schema.json is generated from them by scripts/gen_chart_schema.py, and the
     controller validates this file again at start-up): not spelled again here. Written as JSON (which
     is YAML): every string quoted, so the controller's YAML 1.1 reader never takes a string for something
     else (toYaml leaves e.g. 1000:59 bare, which YAML 1.1 reads as the sexagesimal integer 60059). */}}
{{- define "so.config" -}}
{{- $c := .Values.config -}}
{{- $service := deepCopy (default dict $c.service) -}}
{{- $keys := list -}}
{{- $tokens := list -}}
{{- range $i, $t := .Values.tokens.entries -}}
{{- $key := include "so.tokenKey" $t -}}
{{- if has $key $keys -}}
{{- fail (printf "tokens.entries.%d: the Secret key %q is used twice (give each entry its own key)" $i $key) -}}
{{- end -}}
{{- $keys = append $keys $key -}}
{{- $entry := dict "subject" $t.subject "role" $t.role "tenants" (default list $t.tenants) "token_file" (printf "%s/%s" $.Values.tokens.mountPath $key) -}}
{{- $tokens = append $tokens $entry -}}
{{- end -}}
{{- $_ := set $service "tokens" $tokens -}}
{{- $_ := set $service "workspaces" .Values.workspaces.root -}}
{{- $_ := set $service "workspace_owner" (include "so.workspaceOwner" .) -}}
{{- $ws := .Values.workspaces -}}
{{- $stateDir := include "so.stateDir" . -}}
{{- if or (eq (trimSuffix "/" $ws.root) $stateDir) (hasPrefix (printf "%s/" $stateDir) $ws.root) -}}
{{- fail (printf "workspaces.root (%s) is inside the controller's state dir %s, where the controller refuses every workspace (it holds the evidence and the approval queue): mount them elsewhere, e.g. /workspaces" $ws.root $stateDir) -}}
{{- end -}}
{{- $workspace := dict "mode" $ws.mode "claim" $ws.claims.sandbox "root" $ws.root "copy_max_bytes" (int64 $ws.copyMaxBytes) -}}
{{- $k8s := dict "kubeconfig" nil "namespace" (include "so.sandboxNamespace" .) "image_pull_policy" .Values.backend.imagePullPolicy "seccomp" .Values.backend.seccomp "runtime_classes" .Values.backend.runtimeClasses "workspace" $workspace -}}
{{- if .Values.backend.egress.enabled -}}
{{- $_ := set $k8s "egress" (dict "listen" (printf "0.0.0.0:%d" (int .Values.backend.egress.port)) "address_env" "POD_IP") -}}
{{- end -}}
{{- $config := dict "service" $service "backend" (dict "kind" "kubernetes" "kubernetes" $k8s) -}}
{{- range $section := list "safety" "approvals" "caps" "egress" "evidence" "pool" -}}
{{- $value := index $c $section -}}
{{- if $value -}}
{{- $_ := set $config $section $value -}}
{{- end -}}
{{- end -}}
{{- /* the CI runners' job images join the caps' (a copy: the values are never changed) */ -}}
{{- if .Values.ci.images -}}
{{- $caps := deepCopy (default dict $c.caps) -}}
{{- $_ := set $caps "allowed_images" (concat (default list $caps.allowed_images) .Values.ci.images | uniq) -}}
{{- $_ := set $config "caps" $caps -}}
{{- end -}}
{{- toPrettyJson $config -}}
{{- end -}}

{{- /* The custom profiles: profiles.custom, and the `ci` profile laid over the built-in one (ci.profile). */ -}}
{{- define "so.profiles" -}}
{{- $profiles := deepCopy .Values.profiles.custom -}}
{{- if .Values.ci.profile -}}
{{- if hasKey $profiles "ci" -}}
{{- fail "ci.profile and profiles.custom.ci both define the ci profile: keep one" -}}
{{- end -}}
{{- $_ := set $profiles "ci" (merge (dict "extends" "ci") (deepCopy .Values.ci.profile)) -}}
{{- end -}}
{{- toJson $profiles -}}
{{- end -}}
