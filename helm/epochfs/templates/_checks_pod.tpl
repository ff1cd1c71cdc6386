{{/*
More checks of values that render a pod that cannot work (see _checks.tpl), run by
epochfs.checkSidecarValues for the chart's Job, a parent chart's workloads and every webhook
profile alike: the sidecar's own volumes (a file:// remote needs its folder mounted in the
sidecar), the credentials' files mode, the pod annotations the chart sets itself, the images'
repositories, and sidecar.cutInterval given as a string. Each takes the chart's context.
*/}}

{{/* sidecar.extraVolumes and sidecar.extraVolumeMounts, and a file:// remote against them. The
     sidecar reads a file:// remote in its own container, whose root filesystem is the epochfs
     image's (read-only): without a volume of the dataset mounted there the remote is an empty
     or missing folder, the sidecar refuses it at start and its pod crash-loops. The mount paths
     against the chart's own mounts are in epochfs.checkPaths. */}}
{{- define "epochfs.checkSidecarVolumes" -}}
{{- $v := .Values -}}
{{- $names := list -}}
{{- range $vol := default (list) $v.sidecar.extraVolumes -}}
{{- $name := toString $vol.name -}}
{{- if hasPrefix "epochfs-" $name -}}
{{- fail (printf "sidecar.extraVolumes: %q is a name of the chart's own volumes (every one starts with epochfs-); choose another name" $name) -}}
{{- end -}}
{{- if has $name $names -}}
{{- fail (printf "sidecar.extraVolumes: %q is there twice; a pod's volumes need names of their own" $name) -}}
{{- end -}}
{{- $names = append $names $name -}}
{{- end -}}
{{- $paths := list -}}
{{- range $m := default (list) $v.sidecar.extraVolumeMounts -}}
{{- if not (has (toString $m.name) $names) -}}
{{- fail (printf "sidecar.extraVolumeMounts: %q names no volume of sidecar.extraVolumes" (toString $m.name)) -}}
{{- end -}}
{{- $paths = append $paths (clean (toString $m.mountPath)) -}}
{{- end -}}
{{- $re := "^(?i)file://(?:localhost)?(/[^?#]*)" -}}
{{- $url := toString $v.remote.url -}}
{{- if regexMatch $re $url -}}
{{- $path := clean (regexReplaceAll (printf "%s.*$" $re) $url "${1}") -}}
{{- $held := false -}}
{{- range $p := $paths -}}
{{- if or (eq $p "/") (eq $p $path) (hasPrefix (printf "%s/" $p) $path) -}}{{- $held = true -}}{{- end -}}
{{- end -}}
{{- if not $held -}}
{{- fail (printf "remote.url %s: the sidecar reads %s in its own container, and no mount of sidecar.extraVolumeMounts holds that path (the container's root filesystem is the epochfs image's: the sidecar would find no dataset and crash-loop); add the dataset's volume (a PVC, NFS...) to sidecar.extraVolumes and mount it in sidecar.extraVolumeMounts at %s or a folder above it, readOnly: true (docs/kubernetes.md, \"A dataset on a volume\")" $url $path $path) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* remote.credentials: fileEnv only works with mode=files and a secretName (only then is the
     Secret mounted and the variables set), and mode=files needs both (without fileEnv the Secret
     is mounted and nothing points the SDKs at its files). Each was dropped in silence before. */}}
{{- define "epochfs.checkCredentials" -}}
{{- $c := .Values.remote.credentials -}}
{{- $files := eq (toString $c.mode) "files" -}}
{{- if and $c.fileEnv (not $files) -}}
{{- fail (printf "remote.credentials.fileEnv is set but remote.credentials.mode is %q: fileEnv is read only in files mode (mode env makes every key of the Secret a variable and ignores fileEnv); set remote.credentials.mode=files, or remove fileEnv" (toString $c.mode)) -}}
{{- end -}}
{{- if and $files (not $c.secretName) -}}
{{- fail "remote.credentials.mode=files needs remote.credentials.secretName: the Secret whose files are mounted at remote.credentials.mountPath (without it nothing is mounted and fileEnv would be dropped); set secretName, or leave mode at env for anonymous or workload-identity access" -}}
{{- end -}}
{{- if and $files (not $c.fileEnv) -}}
{{- fail "remote.credentials.mode=files with an empty remote.credentials.fileEnv: the Secret would be mounted and nothing would point the SDKs at its files; set fileEnv (variable -> key of the Secret, e.g. AWS_SHARED_CREDENTIALS_FILE: credentials), or use mode=env" -}}
{{- end -}}
{{- end -}}

{{/* podAnnotations the chart sets itself in the pod, where the chart's value wins (a user's one
     was dropped in silence): prometheus.io/scrape, port and path with metrics.enabled (what the
     annotation-based scrapers read: the sidecar serves /metrics on sidecar.healthPort and
     nowhere else). kubectl.kubernetes.io/default-container is refused in job.yaml (the chart's
     Job sets it to the trainer). */}}
{{- define "epochfs.checkPodAnnotations" -}}
{{- $v := .Values -}}
{{- $ann := default (dict) $v.podAnnotations -}}
{{- if $v.metrics.enabled -}}
{{- range $key := list "prometheus.io/scrape" "prometheus.io/port" "prometheus.io/path" -}}
{{- if hasKey $ann $key -}}
{{- fail (printf "podAnnotations: %s is set by the chart with metrics.enabled (the sidecar serves /metrics on sidecar.healthPort, which the chart's prometheus.io/* annotations name; a value of yours would be dropped); remove it, set sidecar.healthPort to move the port, or metrics.enabled=false to set the prometheus.io/* annotations yourself" $key) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* An image repository (argument: dict "name" <the values' key> "value" <repository>) with no
     tag or digest in it: the chart appends ":<tag>" or "@<digest>", so repo:0.2.0 rendered
     repo:0.2.0:0.1.0, which no registry serves. A registry's port (registry.example:5000/...)
     is a colon before a "/" and stays allowed. */}}
{{- define "epochfs.checkRepository" -}}
{{- $repo := toString .value -}}
{{- if not (regexMatch "^(?:[^/@:]+(?::[0-9]+)?/)?[^@:]+$" $repo) -}}
{{- fail (printf "%s.repository %q holds a tag or a digest: give the repository alone (a registry's port, registry.example:5000/epochfs, is fine) and the tag in %s.tag, or the digest in %s.digest" .name $repo .name .name) -}}
{{- end -}}
{{- end -}}

{{/* sidecar.cutInterval as a decimal string (--set passes 0.5 as one): the schema's bound on a
     number, at most 604800 seconds (a week), for the string too. */}}
{{- define "epochfs.checkCutInterval" -}}
{{- $c := .Values.sidecar.cutInterval -}}
{{- if and (kindIs "string" $c) (gt (float64 $c) 604800.0) -}}
{{- fail (printf "sidecar.cutInterval %s is more than 604800 seconds (a week): an interval no training run reaches; use 0 to cut only on request" $c) -}}
{{- end -}}
{{- end -}}

{{/* The trainer's user: runAsNonRoot (trainer.securityContext's default) with uid 0, from that
     context or from the pod's, is a container the kubelet refuses to start ("runAsUser breaks
     non-root policy"), so the Job waits for ever; refused here with the values to change. */}}
{{- define "epochfs.checkTrainerUser" -}}
{{- $sc := default (dict) .Values.trainer.securityContext -}}
{{- $pod := default (dict) .Values.podSecurityContext -}}
{{- $user := ternary (get $sc "runAsUser") (get $pod "runAsUser") (hasKey $sc "runAsUser") -}}
{{- $nonRoot := ternary (get $sc "runAsNonRoot") (get $pod "runAsNonRoot") (hasKey $sc "runAsNonRoot") -}}
{{- if and $nonRoot (not (kindIs "invalid" $user)) (eq (toString $user) "0") -}}
{{- $from := dict "true" "trainer.securityContext" "false" "podSecurityContext" -}}
{{- fail (printf "the trainer's runAsNonRoot is true (%s.runAsNonRoot) and its runAsUser is 0 (%s.runAsUser): the kubelet refuses to start a container whose user breaks its non-root policy, and the Job would wait for ever; give a non-zero runAsUser, or set trainer.securityContext.runAsNonRoot: false to train as root" (get $from (toString (hasKey $sc "runAsNonRoot"))) (get $from (toString (hasKey $sc "runAsUser")))) -}}
{{- end -}}
{{- end -}}
