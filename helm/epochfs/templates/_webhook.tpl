{{/*
The admission webhook's injection documents (webhook.enabled; docs/kubernetes.md, "Attach with one
annotation"). A document says what a pod gets, rendered by the SAME named templates a parent chart
includes (_attach.tpl, _sidecar.tpl): the sidecar container, the volumes, the trainer's mounts and
environment; and the label that tells the injected pods apart (epochfs.webhook.injectedLabels). The
webhook (sidecar/webhook/) only reads it and writes it into pods, so what it injects cannot drift
from the templates.

One document per profile: "default" from the chart's values, and one for each entry of
webhook.profiles, whose values are deep-merged over the chart's (a profile sets only what differs,
e.g. another remote, the folder view, a bigger cache).
*/}}

{{/* Deep-merge "over" into the map "base", in place: maps merge key by key, anything else (lists,
     false, 0, "" and null included, which sprig's merge functions would skip) replaces. */}}
{{- define "epochfs.webhook.merge" -}}
{{- $base := .base -}}
{{- range $k, $v := .over -}}
{{- if and (kindIs "map" $v) (kindIs "map" (get $base $k)) -}}
{{- include "epochfs.webhook.merge" (dict "base" (get $base $k) "over" $v) -}}
{{- else -}}
{{- $_ := set $base $k $v -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The injection document of one profile, as JSON (argument: dict "root" <the chart's context>
     "name" <profile name>): rendered in the chart's context with the profile's values merged over
     the chart's, and the same release, chart and cluster. */}}
{{- define "epochfs.webhook.injection" -}}
{{- $root := .root -}}
{{- $values := deepCopy $root.Values -}}
{{- if ne .name "default" -}}
{{- include "epochfs.webhook.merge" (dict "base" $values "over" (deepCopy (get $root.Values.webhook.profiles .name))) -}}
{{- end -}}
{{- $ctx := dict "Values" $values "Release" $root.Release "Chart" $root.Chart "Capabilities" $root.Capabilities "Template" $root.Template -}}
{{- if not $values.sidecar.native -}}
{{- fail (printf "webhook profile %s: the webhook injects a native sidecar (an init container with restartPolicy Always, Kubernetes >= 1.29); sidecar.native=false would need the trainer's command wrapped, which only the chart's Job and a parent chart can do" .name) -}}
{{- end -}}
{{- if not $values.remote.url -}}
{{- fail (printf "webhook profile %s: remote.url is required (pods may still override it with the annotation epochfs.io/remote)" .name) -}}
{{- end -}}
{{- $folder := include "epochfs.folderView" $ctx -}}
{{- $size := "" -}}
{{- if ne $values.cache.volume.type "hostPath" -}}{{- $size = include "epochfs.bytes" $values.cache.volume.size -}}{{- end -}}
{{- $doc := dict
    "apiVersion" "epochfs.io/injection-v1"
    "profile" .name
    "view" (ternary "folder" "fuse" (eq $folder "true"))
    "privileged" (ne $folder "true")
    "nodes" (int $values.nodes)
    "cacheVolumeBytes" $size
    "sidecarContainers" (fromYamlArray (include "epochfs.sidecarContainer" $ctx))
    "volumes" (fromYamlArray (include "epochfs.volumes" $ctx))
    "trainerVolumeMounts" (fromYamlArray (include "epochfs.trainerVolumeMounts" $ctx))
    "trainerEnv" (fromYamlArray (include "epochfs.trainerEnv" $ctx))
    "podAnnotations" (default (dict) (fromYaml (include "epochfs.podAnnotations" $ctx)))
    "podLabels" (fromYaml (include "epochfs.webhook.injectedLabels" $root))
    "podSecurityContext" (default (dict) $values.podSecurityContext)
    "imagePullSecrets" (default (list) $values.imagePullSecrets)
-}}
{{- toJson $doc -}}
{{- end -}}

{{/* The profiles' names: default, then webhook.profiles in order. */}}
{{- define "epochfs.webhook.profileNames" -}}
{{- $names := list "default" -}}
{{- range $name, $_ := .Values.webhook.profiles -}}
{{- if eq $name "default" -}}
{{- fail "webhook.profiles: \"default\" is the profile of the chart's own values; give the profile another name" -}}
{{- end -}}
{{- $names = append $names $name -}}
{{- end -}}
{{- toJson $names -}}
{{- end -}}

{{/* The matchCondition of webhook.injectCondition (CEL, on the pod being created): true when the
     pod's annotation epochfs.io/inject, or without that annotation its label, is set and not
     "false". One line, as the API server stores it. */}}
{{- define "epochfs.webhook.injectCondition" -}}
{{- $a := "object.metadata.annotations" -}}{{- $l := "object.metadata.labels" -}}{{- $k := "'epochfs.io/inject'" -}}
{{- printf "(has(%s) && %s in %s) ? %s[%s] != 'false' : (has(%s) && %s in %s && %s[%s] != 'false')" $a $k $a $a $k $l $k $l $l $k -}}
{{- end -}}

{{/* <fullname>-webhook, at most 52 characters like the fullname: a fullname over 44 is cut and
     keeps a hash of the whole (epochfs.cutName), so two long releases keep apart their webhook
     objects, and their cluster-wide configuration (epochfs.webhook.clusterName). */}}
{{- define "epochfs.webhook.fullname" -}}
{{- printf "%s-webhook" (include "epochfs.cutName" (dict "name" (include "epochfs.fullname" .) "max" 44)) -}}
{{- end -}}

{{/* The name of the webhook's cluster-scoped MutatingWebhookConfiguration, also the value of the
     label it puts on the pods it injects: webhook.clusterName, else <webhook fullname>-<namespace>.
     Release names are unique only within a namespace, so a name from the release alone would let
     the same release name installed in a second namespace fail on (or take over) the first's
     configuration, and its PodMonitor scrape the first's pods. At most 63 characters (a label
     value): a longer default is cut and keeps a hash of the whole, so it stays unique. */}}
{{- define "epochfs.webhook.clusterName" -}}
{{- if .Values.webhook.clusterName -}}
{{- .Values.webhook.clusterName -}}
{{- else -}}
{{- $name := printf "%s-%s" (include "epochfs.webhook.fullname" .) .Release.Namespace -}}
{{- if gt (len $name) 63 -}}
{{- $name = printf "%s-%s" ($name | trunc 54 | trimSuffix "-") (sha256sum $name | trunc 8) -}}
{{- end -}}
{{- $name -}}
{{- end -}}
{{- end -}}

{{- define "epochfs.webhook.selectorLabels" -}}
{{- $labels := fromYaml (include "epochfs.selectorLabels" .) -}}
{{- $_ := set $labels "app.kubernetes.io/component" "webhook" -}}
{{- toYaml $labels -}}
{{- end -}}

{{/* The label the webhook puts on every pod it injects, whatever the profile: what the
     PodMonitor of injected pods (podmonitor-injected.yaml) selects, unique per release and
     namespace (epochfs.webhook.clusterName) since it selects in every namespace. Not the chart's
     own pod labels (epochfs.podLabels): those would put other teams' pods under this release's
     Service and NetworkPolicy. */}}
{{- define "epochfs.webhook.injectedLabels" -}}
epochfs.io/injected-by: {{ include "epochfs.webhook.clusterName" . }}
{{- end -}}

{{/* The labels of the webhook's objects (argument: the chart's context, or a dict with it under
     "context" and "extra": epochfs.labels). */}}
{{- define "epochfs.webhook.labels" -}}
{{- $ctx := . -}}{{- $extra := dict -}}
{{- if hasKey . "context" }}{{ $ctx = .context }}{{ $extra = default (dict) .extra }}{{ end -}}
{{- include "epochfs.labels" (dict "context" $ctx "component" "webhook" "extra" $extra) -}}
{{- end -}}

{{/* The TLS Secret the webhook serves with (cert-manager's, or the chart's own). */}}
{{- define "epochfs.webhook.tlsSecretName" -}}
{{- printf "%s-tls" (include "epochfs.webhook.fullname" .) -}}
{{- end -}}

{{/* "true" when the webhook's TLS comes from cert-manager: webhook.certManager.enabled when set
     (true or false, both ways; false is the default), else (null: detect) when the cluster serves
     cert-manager.io/v1 (helm install and upgrade ask the API server; helm template knows only
     --api-versions). */}}
{{- define "epochfs.webhook.certManager" -}}
{{- $enabled := .Values.webhook.certManager.enabled -}}
{{- if kindIs "bool" $enabled -}}
{{- if $enabled }}true{{ end -}}
{{- else if .Capabilities.APIVersions.Has "cert-manager.io/v1" -}}
true
{{- end -}}
{{- end -}}
