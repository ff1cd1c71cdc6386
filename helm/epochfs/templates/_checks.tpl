{{/*
Checks of values that render valid objects but a pod that cannot work: a cache budget its volume
cannot hold, a tmpfs cache over the sidecar's memory limit, chart mounts that coincide or nest,
values the sidecar refuses at start and sidecar.env entries that override the chart's own variables
(epochfs.checkSidecarValues).
epochfs.checkAttach runs them, so the chart's Job, a parent chart's workloads and every webhook
profile get the same refusals. Each takes the chart's context (or a dict with it under "context").
The monitors' checks (epochfs.checkMonitors, at the end) run from servicemonitor.yaml.
*/}}

{{/* Bytes of a size as the sidecar and the webhook parse one (sidecar/confparse.py parse_size): a
     decimal number, an optional unit of k M G T P (powers of 1000) or Ki Mi Gi Ti Pi (of 1024),
     any case, an optional trailing B. A float (1.5T); argument: dict "value" "name" (for errors). */}}
{{- define "epochfs.sizeBytesFloat" -}}
{{- $s := toString .value -}}
{{- $re := "^\\s*([0-9]*\\.?[0-9]+)\\s*([kKmMgGtTpP]?[iI]?)[bB]?\\s*$" -}}
{{- if not (regexMatch $re $s) -}}
{{- fail (printf "%s: %q is not a size like 500Mi, 20Gi or 1.5T" .name $s) -}}
{{- end -}}
{{- $unit := lower (regexReplaceAll $re $s "${2}") -}}
{{- $mult := dict "" 1.0 "i" 1.0 "k" 1e3 "m" 1e6 "g" 1e9 "t" 1e12 "p" 1e15 "ki" 1024.0 "mi" 1048576.0 "gi" 1073741824.0 "ti" 1099511627776.0 "pi" 1125899906842624.0 -}}
{{- if not (hasKey $mult $unit) -}}
{{- fail (printf "%s: %q has no unit of k, M, G, T, P, Ki, Mi, Gi, Ti, Pi" .name $s) -}}
{{- end -}}
{{- mulf (float64 (regexReplaceAll $re $s "${1}")) (get $mult $unit) -}}
{{- end -}}

{{/* Bytes of a Kubernetes resource quantity (a memory limit: 2Gi, 2048Mi, 2e9, 2147483648, or a
     number from a values file), a float; argument: dict "value" "name" (for errors). */}}
{{- define "epochfs.quantityBytes" -}}
{{- $s := toString .value -}}
{{- $re := "^([0-9]*\\.?[0-9]+(?:[eE][-+]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$" -}}
{{- if not (regexMatch $re $s) -}}
{{- fail (printf "%s: %q is not a Kubernetes quantity like 2Gi, 2048Mi or 2e9" .name $s) -}}
{{- end -}}
{{- $mult := dict "" 1.0 "m" 1e-3 "k" 1e3 "M" 1e6 "G" 1e9 "T" 1e12 "P" 1e15 "E" 1e18 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "Pi" 1125899906842624.0 "Ei" 1152921504606846976.0 -}}
{{- mulf (float64 (regexReplaceAll $re $s "${1}")) (get $mult (regexReplaceAll $re $s "${2}")) -}}
{{- end -}}

{{/* The cache volume against what is put in it. */}}
{{- define "epochfs.checkCache" -}}
{{- $ctx := . -}}{{- if hasKey . "context" }}{{ $ctx = .context }}{{ end -}}
{{- $v := $ctx.Values -}}
{{- $vol := $v.cache.volume -}}
{{- /* hostPath: volume.size only sizes the default budget, no volume has that size. */ -}}
{{- if and $v.cache.capacity (ne $vol.type "hostPath") -}}
{{- $size := include "epochfs.bytes" $vol.size | atoi -}}
{{- $limit := include "epochfs.ninetyPercent" $size | atoi -}}
{{- $capacity := include "epochfs.sizeBytesFloat" (dict "value" $v.cache.capacity "name" "cache.capacity") | float64 -}}
{{- /* The webhook's rule for epochfs.io/capacity (sidecar/webhook/overrides.py), in its words. */ -}}
{{- if gt (floor $capacity) (float64 $limit) -}}
{{- fail (printf "cache.capacity: %s is more than the cache volume allows: at most %d bytes, 90%% of its %d (cache.volume.size %s), as the chart gives the sidecar when cache.capacity is empty (the rest holds the index, its WAL and the downloads in flight; a full volume gets the pod evicted): lower cache.capacity or raise cache.volume.size" (toString $v.cache.capacity) $limit $size (toString $vol.size)) -}}
{{- end -}}
{{- end -}}
{{- /* A memory-backed emptyDir's pages count against the memory limit of the container that
       writes them: past the limit the sidecar is OOM-killed, again at every restart. The limit
       must hold a full tmpfs and the sidecar's own use besides, which is its memory request
       (0 when none is set: a request Kubernetes copies from the limit says nothing). */ -}}
{{- if and (eq $vol.type "emptyDir") (eq (toString $vol.medium) "Memory") -}}
{{- $resources := default (dict) $v.sidecar.resources -}}
{{- $limits := $resources.limits | default (dict) -}}
{{- if and (hasKey $limits "memory") (not (kindIs "invalid" $limits.memory)) -}}
{{- $mem := include "epochfs.quantityBytes" (dict "value" $limits.memory "name" "sidecar.resources.limits.memory") | float64 -}}
{{- $size := include "epochfs.bytes" $vol.size | atoi -}}
{{- $requests := $resources.requests | default (dict) -}}
{{- $own := 0.0 -}}{{- $ownText := "none set" -}}
{{- if and (hasKey $requests "memory") (not (kindIs "invalid" $requests.memory)) -}}
{{- $own = include "epochfs.quantityBytes" (dict "value" $requests.memory "name" "sidecar.resources.requests.memory") | float64 -}}
{{- $ownText = toString $requests.memory -}}
{{- end -}}
{{- $needed := addf (float64 $size) $own -}}
{{- if le $mem $needed -}}
{{- fail (printf "cache.volume.medium=Memory: the cache is a tmpfs of cache.volume.size %s, whose pages count against the sidecar's memory, but sidecar.resources.limits.memory is %s, not above that size plus the sidecar's own use (its memory request, %s): %.0f bytes in all; the sidecar would be OOM-killed once the cache fills; raise sidecar.resources.limits.memory above cache.volume.size (plus the sidecar's own use, its request) or lower cache.volume.size" (toString $vol.size) (toString $limits.memory) $ownText $needed) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* 90% of a byte count, exact and without int64 overflow (9 * n overflows from about 1e18):
     9 * (n / 10) + 9 * (n % 10) / 10, the cache budget the chart gives by default. */}}
{{- define "epochfs.ninetyPercent" -}}
{{- $n := int64 . -}}
{{- add (mul (div $n 10) 9) (div (mul (mod $n 10) 9) 10) -}}
{{- end -}}

{{/* The chart's own mounts: no two may be one path or nested. cache.path inside sidecar.mountPath
     puts the writable cache inside the volume the trainer sees (and under the Bidirectional
     mount); a mount inside another shadows part of it, or needs its mount point made in a
     read-only volume, where the container fails to start. /tmp and /dev/shm are the exceptions
     as the outer one: writable scratch (an emptyDir, the shared-memory tmpfs) of each container,
     where a mount point can be made and nothing of epochfs's is shadowed; a chart path equal to
     one, or above it, is refused (the trainer would get two mounts at one path). Each
     entry: (what to name, its path, whether others may nest inside it). */}}
{{- define "epochfs.checkPaths" -}}
{{- $ctx := . -}}{{- if hasKey . "context" }}{{ $ctx = .context }}{{ end -}}
{{- $v := $ctx.Values -}}
{{- $paths := list
    (list "sidecar.mountPath" $v.sidecar.mountPath false)
    (list "cache.path" $v.cache.path false)
    (list "cache.readOnlyPath" (include "epochfs.readOnlyPath" $ctx) false)
    (list "/tmp" "/tmp" true)
    (list "/dev/shm (the trainer's shared memory, trainer.shmSize)" "/dev/shm" true) -}}
{{- if not $v.sidecar.native -}}
{{- $paths = append $paths (list (printf "%s (the legacy mode's control folder)" (include "epochfs.controlDir" $ctx)) (include "epochfs.controlDir" $ctx) false) -}}
{{- end -}}
{{- if and $v.remote.credentials.secretName (eq $v.remote.credentials.mode "files") -}}
{{- $paths = append $paths (list "remote.credentials.mountPath" $v.remote.credentials.mountPath false) -}}
{{- end -}}
{{- if $v.kubeReporting.enabled -}}
{{- $paths = append $paths (list "/var/run/secrets/kubernetes.io/serviceaccount (kubeReporting's token)" "/var/run/secrets/kubernetes.io/serviceaccount" false) -}}
{{- end -}}
{{- /* The sidecar's extra mounts (a fourth element, true): against the chart's mounts as these are
       against each other; among themselves only one path twice is refused (Kubernetes refuses
       it), nesting being the user's own choice. */ -}}
{{- range $m := default (list) $v.sidecar.extraVolumeMounts -}}
{{- $paths = append $paths (list (printf "sidecar.extraVolumeMounts %s" (toString $m.name)) (toString $m.mountPath) false true) -}}
{{- end -}}
{{- range $i, $a := $paths -}}
{{- range $j, $b := $paths -}}
{{- if lt $i $j -}}
{{- $pa := clean (index $a 1) -}}{{- $pb := clean (index $b 1) -}}
{{- /* As folders: "/" stays "/", "/a" becomes "/a/", so /a and /ab are apart. */ -}}
{{- $fa := ternary $pa (printf "%s/" $pa) (eq $pa "/") -}}{{- $fb := ternary $pb (printf "%s/" $pb) (eq $pb "/") -}}
{{- $extras := and (gt (len $a) 3) (gt (len $b) 3) -}}
{{- if or (eq $fa $fb) (and (not $extras) (or (and (hasPrefix $fa $fb) (not (index $a 2))) (and (hasPrefix $fb $fa) (not (index $b 2))))) -}}
{{- fail (printf "%s (%s) and %s (%s) are one path or one is inside the other: each is a mount of its own in the pod (cache.path inside sidecar.mountPath would put the writable cache where the trainer reads); choose paths apart" (index $a 0) $pa (index $b 0) $pb) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}


{{/* Values the sidecar parses at start and refuses there (sidecar/confparse.py, the --capacity,
     --endpoint-url and --schedule parsers): a refused one exits the sidecar at every start, so
     the pod crash-loops and a Job never ends. Refused here instead, accepting every form the
     sidecar accepts. */}}
{{- define "epochfs.checkSidecarValues" -}}
{{- $ctx := . -}}{{- if hasKey . "context" }}{{ $ctx = .context }}{{ end -}}
{{- $v := $ctx.Values -}}
{{- /* A budget the sidecar reads as 0 bytes (0, 0.1, 0Ki...) is "must be positive". */ -}}
{{- if $v.cache.capacity -}}
{{- $capacity := include "epochfs.sizeBytesFloat" (dict "value" $v.cache.capacity "name" "cache.capacity") | float64 -}}
{{- if lt (floor $capacity) 1.0 -}}
{{- fail (printf "cache.capacity: %q is not a positive size (the sidecar counts whole bytes and refuses a budget of 0); give a size like 500Mi, 20Gi or 1.5T, or leave it empty for 90%% of cache.volume.size" (toString $v.cache.capacity)) -}}
{{- end -}}
{{- end -}}
{{- include "epochfs.checkRemoteUrl" $v.remote.url -}}
{{- include "epochfs.checkEndpointUrl" $v.remote.endpointUrl -}}
{{- include "epochfs.checkSchedule" $v.sidecar.schedule -}}
{{- include "epochfs.checkMinSamples" $v.sidecar -}}
{{- include "epochfs.checkSidecarEnv" $v -}}
{{- include "epochfs.checkSidecarVolumes" $ctx -}}
{{- include "epochfs.checkCredentials" $ctx -}}
{{- include "epochfs.checkPodAnnotations" $ctx -}}
{{- include "epochfs.checkRepository" (dict "name" "image" "value" $v.image.repository) -}}
{{- include "epochfs.checkCutInterval" $ctx -}}
{{- end -}}

{{/* sidecar.env (argument: the values) must not name a variable the chart sets itself in the
     sidecar (epochfs.sidecarContainer): sidecar.env comes after them, so the pod would hold the
     name twice and the later, the user's, would win in silence, past every check of the value the
     chart reads (a capacity over the volume, a port the probes, the Service and the monitors do
     not use, a view the pod is not wired for). Each name says the value to set instead. */}}
{{- define "epochfs.checkSidecarEnv" -}}
{{- $v := . -}}
{{- $own := dict
    "EPOCHFS_REMOTE" "set remote.url" "EPOCHFS_ENDPOINT_URL" "set remote.endpointUrl"
    "EPOCHFS_INDEX" "set remote.indexUrl" "EPOCHFS_INCLUDE" "set remote.include"
    "EPOCHFS_EXCLUDE" "set remote.exclude" "EPOCHFS_CACHE" "set cache.path"
    "EPOCHFS_MOUNT" "set sidecar.mountPath (the view is <mountPath>/view)" "EPOCHFS_VIEW" "set sidecar.view"
    "EPOCHFS_LINK_ROOT" "set cache.readOnlyPath" "EPOCHFS_CAPACITY" "set cache.capacity"
    "EPOCHFS_SHARD_INDEX" "set nodes (each pod gets its shard)" "EPOCHFS_SHARD_COUNT" "set nodes"
    "EPOCHFS_HEALTH_PORT" "set sidecar.healthPort"
    "EPOCHFS_METRICS_PORT" "set sidecar.healthPort (the chart serves /metrics there: its Service, monitors and annotations scrape that port)"
    "EPOCHFS_SEED" "set sidecar.seed" "EPOCHFS_MIN_SAMPLES" "set sidecar.minSamples"
    "EPOCHFS_KEEP_EPOCHS" "set sidecar.keepEpochs" "EPOCHFS_CONCURRENCY" "set sidecar.concurrency"
    "EPOCHFS_SCHEDULE" "set sidecar.schedule" "EPOCHFS_CUT_INTERVAL" "set sidecar.cutInterval"
    "EPOCHFS_KUBE_REPORTING" "set kubeReporting.enabled"
    "EPOCHFS_KUBE_STATUS_INTERVAL" "set kubeReporting.statusIntervalSeconds"
    "EPOCHFS_KUBE_ERROR_THRESHOLD" "set kubeReporting.remoteErrorThreshold"
    "HOME" "leave HOME to the chart (/tmp, the sidecar's only writable folder)" -}}
{{- if $v.kubeReporting.enabled -}}
{{- range $name := list "POD_NAME" "POD_NAMESPACE" "POD_UID" "NODE_NAME" -}}
{{- $_ := set $own $name "leave it to the chart (the downward API, for kubeReporting)" -}}
{{- end -}}
{{- end -}}
{{- /* fileEnv's variables come after the chart's too: the same names are refused there. */ -}}
{{- $creds := $v.remote.credentials -}}
{{- range $name, $key := $creds.fileEnv -}}
{{- if hasKey $own $name -}}
{{- fail (printf "remote.credentials.fileEnv: %s is the chart's own to set (fileEnv's variables come after the chart's, so it would silently override the value the chart sets, checks and wires the pod for): remove it and %s" $name (get $own $name)) -}}
{{- end -}}
{{- end -}}
{{- if and $creds.secretName (eq $creds.mode "files") -}}
{{- range $name, $key := $creds.fileEnv -}}
{{- $_ := set $own $name "keep it in remote.credentials.fileEnv alone" -}}
{{- end -}}
{{- end -}}
{{- range $e := default (list) $v.sidecar.env -}}
{{- $name := toString $e.name -}}
{{- if hasKey $own $name -}}
{{- fail (printf "sidecar.env: %s is the chart's own to set (it comes after the chart's variables, so it would silently override or bypass the value the chart sets, checks and wires the pod for): remove it and %s" $name (get $own $name)) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* sidecar.minSamples against sidecar.schedule's initial (1000 when not given): a schedule's
     epoch 0 holds initial keys, so more minSamples than that is never met, and the sidecar
     refuses the pair at start (SidecarSettings.validate). Runs after checkSchedule: the
     schedule is well formed here. */}}
{{- define "epochfs.checkMinSamples" -}}
{{- $s := toString (default "" .schedule) -}}
{{- if $s -}}
{{- /* Compared as float64, which reads decimal digits as Python's int() does: sprig's int64
       reads a leading 0 as octal ("0100" is 64) and a number past int64 as 0. */ -}}
{{- $initial := "1000" -}}
{{- range $part := splitList "," $s -}}
{{- if eq (trim (regexReplaceAll "=.*$" $part "")) "initial" -}}
{{- $initial = trim (regexReplaceAll "^[^=]*=" $part "") | replace "_" "" | trimPrefix "+" -}}
{{- end -}}
{{- end -}}
{{- $min := toString (default 1 .minSamples) -}}
{{- if gt (float64 $min) (float64 $initial) -}}
{{- fail (printf "sidecar.minSamples %s is more than sidecar.schedule's initial=%s: epoch 0 of the schedule holds %s keys, so no epoch could ever be cut; the sidecar refuses the pair at start and its pod crash-loops. Lower minSamples or raise initial" $min $initial $initial) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* remote.url (argument: the value): the mistakes values.schema.json lets through so that they
     are explained here in words, not by its pattern: no scheme (bkt/prefix, /data/train), a
     scheme without its two slashes (s3:/bkt/prefix), a store's host:port where the bucket goes
     (s3://minio:9000/bkt). The words follow the sidecar's start-up check (check_url in
     sidecar/remote/registry.py), which refuses each of them. Empty is the caller's to refuse. */}}
{{- define "epochfs.checkRemoteUrl" -}}
{{- $url := toString (default "" .) -}}
{{- if regexMatch "^(?i)(s3|gs|gcs)://[^/]*@" $url -}}
{{- /* Never echoed: a key before the "@" would reach the CI log that shows the error. (az:// names
     its account host after an "@", and an http(s) URL may carry a user: both are the sidecar's.) */ -}}
{{- fail "remote.url holds credentials (a key or password before an \"@\"; the value is not shown here): an s3:// or gs:// URL names the bucket and prefix only; give the credentials in remote.credentials (a Secret) or use the node's workload identity" -}}
{{- end -}}
{{- $schemes := "s3://, gs://, gcs://, az://, abfs://, abfss://, https://, http://, file://" -}}
{{- $known := "^(?i)(s3|gs|gcs|az|abfs|abfss|https?|file)" -}}
{{- if and $url (not (contains ":" $url)) -}}
{{- $like := "s3://BUCKET/PREFIX, gs://BUCKET/PREFIX, az://CONTAINER/PREFIX, https://HOST/PATH or file:///PATH" -}}
{{- if hasPrefix "/" $url -}}{{- $like = printf "file://%s for a folder of a volume mounted into the sidecar, or s3://BUCKET/PREFIX" $url -}}{{- end -}}
{{- fail (printf "remote.url %q has no scheme (%s): give a URL such as %s; the sidecar refuses it at start and its pod crash-loops" $url $schemes $like) -}}
{{- end -}}
{{- if and (regexMatch "^[A-Za-z][A-Za-z0-9+.-]*:" $url) (not (regexMatch (printf "%s:" $known) $url)) -}}
{{- fail (printf "remote.url %q: unknown URL scheme %q (known: %s); the sidecar refuses it at start and its pod crash-loops" $url (regexReplaceAll "^([A-Za-z][A-Za-z0-9+.-]*):.*$" $url "${1}") $schemes) -}}
{{- end -}}
{{- if regexMatch (printf "%s:/?([^/]|$)" $known) $url -}}
{{- $scheme := regexReplaceAll (printf "%s:.*$" $known) $url "${1}" -}}
{{- $rest := regexReplaceAll (printf "%s:/?" $known) $url "" -}}
{{- $fixed := printf "%s://%s" $scheme $rest -}}
{{- if eq (lower $scheme) "file" -}}{{- $fixed = printf "file:///%s" $rest -}}{{- end -}}
{{- fail (printf "remote.url %q: the scheme needs two slashes after its colon, as in %s (%s); the sidecar refuses it at start and its pod crash-loops" $url $fixed $schemes) -}}
{{- end -}}
{{- $hostPort := "^(?i)(s3|gs|gcs)://([^/@:]*:[^/]*)(/.*)?$" -}}
{{- if regexMatch $hostPort $url -}}
{{- $scheme := regexReplaceAll $hostPort $url "${1}" -}}
{{- $bucket := regexReplaceAll $hostPort $url "${2}" -}}
{{- fail (printf "remote.url %q: %q is not a bucket name (letters, digits, '.', '-' and '_' only); a store's host:port goes in remote.endpointUrl, as http://%s, and remote.url is %s://BUCKET/PREFIX" $url $bucket $bucket $scheme) -}}
{{- end -}}
{{- end -}}

{{/* remote.endpointUrl (argument: the value): empty, or an http(s) URL with a host and, after a
     ':', a port of 0-65535, as urlsplit reads one, and no user:password@ (the sidecar refuses it:
     S3 signs with the AWS_* credentials). The message names the key, not the value: it may hold
     a password. */}}
{{- define "epochfs.checkEndpointUrl" -}}
{{- $url := trim (toString (default "" .)) -}}
{{- if $url -}}
{{- $why := "" -}}
{{- $re := "^(?i)https?://(?:[^/?#]*@)?(?:\\[[^\\]/?#@]*\\]|[^/?#@:\\[\\]]+)(?::([0-9]*))?(?:[/?#].*)?$" -}}
{{- if regexMatch "[\\s[:cntrl:]]" $url -}}
{{- $why = "it has spaces or control characters" -}}
{{- else if not (regexMatch "^(?i)https?://" $url) -}}
{{- $why = "it has no http:// or https:// scheme" -}}
{{- else if regexMatch "^(?i)https?://[^/?#]*@" $url -}}
{{- $why = "it holds credentials (user:password@), which no S3 store reads there (the AWS_* credentials sign every request: remote.credentials)" -}}
{{- else if not (regexMatch $re $url) -}}
{{- $why = "it has no host, or a port that is not a number" -}}
{{- else if gt (regexReplaceAll $re $url "${1}" | default "0" | atoi) 65535 -}}
{{- $why = "its port is past 65535" -}}
{{- end -}}
{{- if $why -}}
{{- fail (printf "remote.endpointUrl must be an http(s) URL with a host, such as http://minio:9000, and %s: the sidecar refuses it at start and its pod crash-loops (the value is not shown: it may hold a password)" $why) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* sidecar.schedule (argument: the value): empty (snapshot mode), or comma-separated name=value
     fields, initial (an integer of at least 1) and growth (a number of at least 1.0), each
     optional, as Schedule.parse (sidecar/store/records.py) reads them: Python's int() and
     float() forms, underscores between digits included. */}}
{{- define "epochfs.checkSchedule" -}}
{{- $s := toString (default "" .) -}}
{{- if $s -}}
{{- $digits := "[0-9](?:_?[0-9])*" -}}
{{- $float := printf "^\\+?(?:%s(?:\\.(?:%s)?)?|\\.%s)(?:[eE][-+]?%s)?$" $digits $digits $digits $digits -}}
{{- range $part := splitList "," $s -}}
{{- $why := "" -}}
{{- if not (contains "=" $part) -}}
{{- $why = printf "%q is not name=value" $part -}}
{{- else -}}
{{- $name := trim (regexReplaceAll "=.*$" $part "") -}}
{{- $value := trim (regexReplaceAll "^[^=]*=" $part "") -}}
{{- if eq $name "initial" -}}
{{- if not (and (regexMatch (printf "^\\+?%s$" $digits) $value) (regexMatch "[1-9]" $value)) -}}
{{- $why = printf "initial %q is not a whole number of at least 1" $value -}}
{{- end -}}
{{- else if eq $name "growth" -}}
{{- if not (and (regexMatch $float $value) (ge (float64 (replace "_" "" $value)) 1.0)) -}}
{{- $why = printf "growth %q is not a number of at least 1.0" $value -}}
{{- end -}}
{{- else -}}
{{- $why = printf "%q is not a field (initial or growth)" $name -}}
{{- end -}}
{{- end -}}
{{- if $why -}}
{{- fail (printf "sidecar.schedule %q: %s; a schedule is initial=<keys, at least 1>,growth=<at least 1.0>, e.g. initial=1000,growth=1.5 (empty: snapshot mode); the sidecar refuses any other at start and its pod crash-loops" $s $why) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Milliseconds of a Prometheus duration (argument: the string, as the schema lets it through:
     empty, or one or more <digits><ms|s|m|h|d|w|y>, e.g. 1m30s), a float; helm has no duration
     parser. Prometheus' units: a day is 24h, a week 7d, a year 365d. */}}
{{- define "epochfs.durationMs" -}}
{{- $units := dict "ms" 1.0 "s" 1e3 "m" 6e4 "h" 3.6e6 "d" 8.64e7 "w" 6.048e8 "y" 3.1536e10 -}}
{{- $total := 0.0 -}}
{{- range $part := regexFindAll "[0-9]+(ms|s|m|h|d|w|y)" (toString .) -1 -}}
{{- $total = addf $total (mulf (float64 (regexReplaceAll "[a-z]+$" $part "")) (get $units (regexReplaceAll "^[0-9]+" $part ""))) -}}
{{- end -}}
{{- $total -}}
{{- end -}}

{{/* The Prometheus Operator's monitors (argument: the chart's context). A ServiceMonitor selects
     the metrics Service, which metrics.enabled=false leaves out, so it would render nothing and
     say nothing; the PodMonitor needs no Service. A scrapeTimeout longer than the interval is a
     scrape config Prometheus refuses (the Operator drops the monitor), so no sidecar would be
     scraped. Both monitors at once scrape every sidecar twice. */}}
{{- define "epochfs.checkMonitors" -}}
{{- $m := .Values.metrics -}}
{{- if and $m.serviceMonitor.enabled (not $m.enabled) -}}
{{- fail "metrics.serviceMonitor.enabled needs metrics.enabled: the ServiceMonitor scrapes the metrics Service, which metrics.enabled=false leaves out; set metrics.enabled=true, or use metrics.podMonitor (it needs no Service)" -}}
{{- end -}}
{{- if and $m.serviceMonitor.enabled $m.podMonitor.enabled -}}
{{- fail "metrics.serviceMonitor.enabled and metrics.podMonitor.enabled: choose one, or every sidecar is scraped twice (and every alert fires twice)" -}}
{{- end -}}
{{- range $name := list "serviceMonitor" "podMonitor" -}}
{{- $cfg := get $m $name -}}
{{- if and $cfg.enabled $cfg.interval $cfg.scrapeTimeout -}}
{{- $interval := include "epochfs.durationMs" $cfg.interval | float64 -}}
{{- $timeout := include "epochfs.durationMs" $cfg.scrapeTimeout | float64 -}}
{{- if gt $timeout $interval -}}
{{- fail (printf "metrics.%s.scrapeTimeout %s is longer than its interval %s: Prometheus refuses a scrape timeout greater than the scrape interval (the Operator drops the monitor, and no sidecar is scraped); lower metrics.%s.scrapeTimeout or raise metrics.%s.interval" $name (toString $cfg.scrapeTimeout) (toString $cfg.interval) $name $name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The chart's Job with an emptyDir cache on node disk against the pod's ephemeral-storage
     limit. The kubelet evicts a pod whose ephemeral storage (its disk-backed emptyDirs, writable
     layers and logs) passes the sum of its containers' ephemeral-storage limits, wherever one
     container sets one: a limit meant for the sidecar's own scratch, below the cache it fills,
     gets the pod evicted once the cache passes it, again after every restart. The limits must
     hold the cache volume and the scratch volume (trainer.tmpSizeLimit). Only here, where the
     chart renders every container of the pod; a pod the webhook or a parent chart builds has
     its trainer's limits elsewhere (values.yaml, sidecar.resources, says the rule). */}}
{{- define "epochfs.checkPodEphemeralStorage" -}}
{{- $v := .Values -}}
{{- $vol := $v.cache.volume -}}
{{- if and (eq $vol.type "emptyDir") (not $vol.medium) -}}
{{- $total := 0.0 -}}{{- $named := list -}}
{{- range $who := list "sidecar" "trainer" -}}
{{- $limits := (default (dict) (get (default (dict) (get $v $who)) "resources")).limits | default (dict) -}}
{{- if and (hasKey $limits "ephemeral-storage") (not (kindIs "invalid" (get $limits "ephemeral-storage"))) -}}
{{- $limit := get $limits "ephemeral-storage" -}}
{{- $name := printf "%s.resources.limits.ephemeral-storage" $who -}}
{{- $total = addf $total (include "epochfs.quantityBytes" (dict "value" $limit "name" $name) | float64) -}}
{{- $named = append $named (printf "%s %s" $name (toString $limit)) -}}
{{- end -}}
{{- end -}}
{{- if $named -}}
{{- $size := include "epochfs.bytes" $vol.size | atoi -}}
{{- $tmpText := toString ($v.trainer.tmpSizeLimit | default "1Gi") -}}
{{- $tmp := include "epochfs.quantityBytes" (dict "value" $tmpText "name" "trainer.tmpSizeLimit") | float64 -}}
{{- $needed := addf (float64 $size) $tmp -}}
{{- if lt $total $needed -}}
{{- fail (printf "the pod's ephemeral-storage limit is %.0f bytes (%s), below what its emptyDirs on node disk may hold: the cache (cache.volume.size %s) and the scratch volume (trainer.tmpSizeLimit %s), %.0f bytes; the kubelet evicts the pod once its disk use passes the sum of its containers' limits, so the filling cache would get it evicted: raise the limit above cache.volume.size plus trainer.tmpSizeLimit, remove it, or lower cache.volume.size" $total (join ", " $named) (toString $vol.size) $tmpText $needed) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
