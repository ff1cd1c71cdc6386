{{/* Names, labels and the small computations shared by the templates.

Templates a parent chart may include (those of _attach.tpl and epochfs.sidecarContainer) take
either the chart's context ("." here, .Subcharts.epochfs in a parent) or a dict with that context
under "context" plus options (see _attach.tpl). The helpers below take the chart's context. */}}

{{- define "epochfs.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Full name: release-chart, at most 52 characters so that "<job>-<index>" pod host names
     and generated pod names stay under the 63-character DNS label limit (epochfs.cutName: a
     longer one is cut and keeps a hash of the whole, so long releases stay apart). */}}
{{- define "epochfs.fullname" -}}
{{- $full := "" -}}
{{- if .Values.fullnameOverride -}}
{{- $full = .Values.fullnameOverride -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- $full = .Release.Name -}}
{{- else -}}
{{- $full = printf "%s-%s" .Release.Name $name -}}
{{- end -}}
{{- end -}}
{{- include "epochfs.cutName" (dict "name" $full "max" 52) -}}
{{- end -}}

{{/* The chart's Service takes its full name, which must then be a DNS-1035 label (the API refuses
     the Service otherwise; the other objects take DNS-1123 names). */}}
{{- define "epochfs.checkServiceName" -}}
{{- $name := include "epochfs.fullname" . -}}
{{- if not (regexMatch "^[a-z]([-a-z0-9]*[a-z0-9])?$" $name) -}}
{{- fail (printf "the chart's Service would be named %q (from %s), which Kubernetes refuses: a Service's name is lowercase letters, digits and '-', starting with a letter and ending with a letter or digit; set fullnameOverride to one" $name (ternary "fullnameOverride" "the release name and nameOverride" (not (empty .Values.fullnameOverride)))) -}}
{{- end -}}
{{- end -}}

{{/* A name of at most "max" characters (argument: dict "name" "max"). One that fits is kept as
     it is (the objects of existing releases keep their names on upgrade); a longer one is cut
     and ends in "-" plus 8 hex digits of the sha256 of the whole name. Cutting alone made two
     long names that differ only past the cut (release "...-a1" and "...-a2", Helm allows 53
     characters) one name: the second release's objects collided with the first's. */}}
{{- define "epochfs.cutName" -}}
{{- $name := toString .name -}}
{{- $max := int .max -}}
{{- if le (len $name) $max -}}
{{- $name | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" ($name | trunc (sub $max 9 | int) | trimSuffix "-") (sha256sum $name | trunc 8) -}}
{{- end -}}
{{- end -}}

{{- define "epochfs.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "epochfs.selectorLabels" -}}
app.kubernetes.io/name: {{ include "epochfs.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The labels of one object, as ONE map rendered once: a key twice in one mapping is refused by
     strict YAML readers (kustomize, kubectl's), and a last-wins reader (Helm's) may give a
     Deployment a template whose labels no longer match its selector, which the API server
     refuses. commonLabels first, over them the object's own extra labels, over both the chart's
     own (helm.sh/chart, app.kubernetes.io/*, and the object's component), which nothing replaces.
     commonLabels never bring an app.kubernetes.io/component: the chart's selectors tell its
     pods (training, webhook, test) apart by it. Argument: the chart's context, or a dict with it
     under "context" and optionally "component" (the object's app.kubernetes.io/component) and
     "extra" (a label map of the object's values, e.g. a monitor's labels). */}}
{{- define "epochfs.labels" -}}
{{- $ctx := . -}}{{- $opts := dict -}}
{{- if hasKey . "context" }}{{ $ctx = .context }}{{ $opts = . }}{{ end -}}
{{- $own := dict "helm.sh/chart" (include "epochfs.chart" $ctx) "app.kubernetes.io/version" $ctx.Chart.AppVersion
    "app.kubernetes.io/managed-by" $ctx.Release.Service "app.kubernetes.io/part-of" "epochfs" -}}
{{- $own = merge $own (fromYaml (include "epochfs.selectorLabels" $ctx)) -}}
{{- with $opts.component }}{{ $_ := set $own "app.kubernetes.io/component" . }}{{ end -}}
{{- $extra := default (dict) $opts.extra -}}
{{- toYaml (merge $own $extra (include "epochfs.commonLabels" $ctx | fromYaml)) -}}
{{- end -}}

{{/* commonLabels less app.kubernetes.io/component (see epochfs.labels), a map as YAML. */}}
{{- define "epochfs.commonLabels" -}}
{{- toYaml (omit (default (dict) .Values.commonLabels) "app.kubernetes.io/component") -}}
{{- end -}}

{{/* Where the chart's pods may run and how they pull their images: imagePullSecrets, nodeSelector
     and tolerations of the values, as pod spec keys (indent with nindent). The training Job and
     the `helm test` pod share them: a test pod without them could not pull a private image
     (ImagePullBackOff) nor run on the tainted or selected nodes, so `helm test` failed while the
     sidecars were healthy. */}}
{{- define "epochfs.podPlacement" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The ServiceAccount of the pods (a parent may include it too: see _attach.tpl). */}}
{{- define "epochfs.serviceAccountName" -}}
{{- $ctx := . -}}{{- if hasKey . "context" }}{{ $ctx = .context }}{{ end -}}
{{- if $ctx.Values.serviceAccount.create -}}
{{- default (include "epochfs.fullname" $ctx) $ctx.Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" $ctx.Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "epochfs.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The chart's Job's trainer image. An empty tag without a digest rendered "repo:", an image
     reference every container runtime refuses (the pod never starts). */}}
{{- define "epochfs.trainerImage" -}}
{{- include "epochfs.checkRepository" (dict "name" "trainer.image" "value" .Values.trainer.image.repository) -}}
{{- if and (not .Values.trainer.image.digest) (not .Values.trainer.image.tag) -}}
{{- fail "trainer.image.tag is empty and trainer.image.digest too: the trainer's image would be \"<repository>:\", which no runtime pulls; set trainer.image.tag (e.g. 2.5.1-cuda12.4-cudnn9-runtime) or trainer.image.digest (sha256:...)" -}}
{{- end -}}
{{- if .Values.trainer.image.digest -}}
{{- printf "%s@%s" .Values.trainer.image.repository .Values.trainer.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.trainer.image.repository .Values.trainer.image.tag -}}
{{- end -}}
{{- end -}}

{{/* Bytes of a Kubernetes quantity with an integer and an optional unit (20Gi, 500M, 4096). */}}
{{- define "epochfs.bytes" -}}
{{- $s := toString . -}}
{{- $num := regexFind "^[0-9]+" $s -}}
{{- $unit := trimPrefix $num $s -}}
{{- $mult := dict "" 1 "k" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 "P" 1000000000000000 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 "Pi" 1125899906842624 -}}
{{- if or (not $num) (not (hasKey $mult $unit)) -}}
{{- fail (printf "cache.volume.size: %q is not a size like 20Gi, 500Mi or 1T" $s) -}}
{{- end -}}
{{- mul (atoi $num) (get $mult $unit) -}}
{{- end -}}

{{/* The cache budget handed to the sidecar: cache.capacity, else 90% of the volume size (the
     rest holds the SQLite index, its WAL and the downloads in flight). */}}
{{- define "epochfs.capacity" -}}
{{- if .Values.cache.capacity -}}
{{- .Values.cache.capacity -}}
{{- else -}}
{{- $budget := include "epochfs.ninetyPercent" (include "epochfs.bytes" .Values.cache.volume.size | atoi) -}}
{{- if lt (atoi $budget) 1 -}}
{{- fail (printf "cache.volume.size %s leaves a cache budget of 0 bytes (90%% of it, rounded down), which the sidecar refuses at start (its pod would crash-loop); give the volume a size such as 20Gi, or cache.capacity" (toString .Values.cache.volume.size)) -}}
{{- end -}}
{{- $budget -}}
{{- end -}}
{{- end -}}

{{- define "epochfs.indexed" -}}
{{- if gt (int .Values.nodes) 1 -}}true{{- end -}}
{{- end -}}

{{/* Sub-folder of the cache volume on a hostPath, none otherwise: <sub-folder>/shard-<i>, where
     the sub-folder is cache.volume.hostPath.subPath or else <namespace>/<release>. The node folder
     outlives the pod, so without the release in it a second release (another dataset) on a node
     where the first ran would find the first's cache, which the sampler refuses (another remote):
     a crash loop. Release names are unique only within a namespace, hence the namespace too. */}}
{{- define "epochfs.cacheSubPathExpr" -}}
{{- if eq .Values.cache.volume.type "hostPath" -}}
{{- $sub := .Values.cache.volume.hostPath.subPath | default (printf "%s/%s" .Release.Namespace .Release.Name) -}}
{{- printf "%s/shard-$(EPOCHFS_SHARD_INDEX)" (trimSuffix "/" $sub) -}}
{{- end -}}
{{- end -}}

{{- define "epochfs.controlDir" -}}/var/run/epochfs-control{{- end -}}

{{/* Legacy sidecar mode: how long, in seconds, the sidecar's shell keeps the view up after the
     pod's SIGTERM while the trainer has not exited: terminationGracePeriodSeconds less a margin
     (5 s, at most half of it) in which the sidecar unmounts before the kubelet's SIGKILL. */}}
{{- define "epochfs.legacyStopWait" -}}
{{- $grace := int64 .Values.terminationGracePeriodSeconds -}}
{{- sub $grace (min 5 (div $grace 2)) -}}
{{- end -}}

{{/* The resources of the sidecar: sidecar.resources, plus an ephemeral-storage request as large
     as an emptyDir cache on node disk (values.yaml cache.volume.requestEphemeralStorage says why)
     unless the user sets an ephemeral-storage request or limit. */}}
{{- define "epochfs.sidecarResources" -}}
{{- $res := deepCopy (default (dict) .Values.sidecar.resources) -}}
{{- $vol := .Values.cache.volume -}}
{{- if and $vol.requestEphemeralStorage (eq $vol.type "emptyDir") (not $vol.medium) -}}
{{- $requests := default (dict) (get $res "requests") -}}
{{- $limits := default (dict) (get $res "limits") -}}
{{- if not (or (hasKey $requests "ephemeral-storage") (hasKey $limits "ephemeral-storage")) -}}
{{- $_ := set $requests "ephemeral-storage" $vol.size -}}
{{- $_ = set $res "requests" $requests -}}
{{- end -}}
{{- end -}}
{{- with $res }}{{ toYaml . }}{{ end -}}
{{- end -}}

{{/* The name of an object the chart may place outside the release's namespace (a monitor or the
     PrometheusRule, in metrics.<kind>.namespace; argument: dict "context" <the chart's context>
     "base" <its name> "namespace" <that value>): "base" in the release's own namespace, else
     "<base>-<release namespace>". Release names are unique only within a namespace: two releases
     of one name in two namespaces that put their monitors in one shared namespace would otherwise
     claim the same object there (the second install fails on the first's). */}}
{{- define "epochfs.placedName" -}}
{{- $ns := .context.Release.Namespace -}}
{{- if or (not .namespace) (eq .namespace $ns) -}}
{{- .base -}}
{{- else -}}
{{- printf "%s-%s" .base $ns -}}
{{- end -}}
{{- end -}}

{{/* The Grafana dashboard's uid: unique per release (Grafana keys dashboards by uid, so two
     releases with one uid would overwrite each other), at most Grafana's 40 characters. */}}
{{- define "epochfs.dashboardUid" -}}
{{- $hash := sha256sum (printf "%s/%s" .Release.Namespace .Release.Name) | trunc 8 -}}
{{- printf "epochfs-%s-%s" (.Release.Name | trunc 23 | trimSuffix "-") $hash -}}
{{- end -}}

{{/* The scrape settings a ServiceMonitor endpoint and a PodMonitor endpoint share (argument: the
monitor's values): interval, scrapeTimeout, relabelings, metricRelabelings, each only when set. */}}
{{- define "epochfs.scrapeEndpoint" -}}
{{- with .interval }}
interval: {{ . }}
{{- end }}
{{- with .scrapeTimeout }}
scrapeTimeout: {{ . }}
{{- end }}
{{- with .relabelings }}
relabelings:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .metricRelabelings }}
metricRelabelings:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* A label map as "k=v, k=v" (sorted), for NOTES. */}}
{{- define "epochfs.labelList" -}}
{{- $out := list -}}
{{- range $k, $v := . }}{{ $out = append $out (printf "%s=%s" $k $v) }}{{ end -}}
{{- join ", " $out -}}
{{- end -}}

{{/* "true" when the `helm test` pod renders: it asks /readyz on the metrics port of the pods behind
     the release's headless Service, the chart's Job or a parent's workload attached with the
     named templates. Not for a webhook-only install (job.enabled=false, webhook.enabled): the
     webhook injects pods in other namespaces, which that Service never selects, so the test
     would always fail. */}}
{{- define "epochfs.readyzTest" -}}
{{- $v := .Values -}}
{{- if and $v.tests.enabled $v.metrics.enabled (or $v.job.enabled (not $v.webhook.enabled)) }}true{{ end -}}
{{- end -}}
