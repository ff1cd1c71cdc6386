{{/*
Checks of values that render valid objects but a pod that cannot work: a cache budget its volume
cannot hold, a tmpfs cache over the sidecar's memory limit, chart mounts that coincide or nest, and
values the sidecar refuses at start (epochfs.checkSidecarValues).
epochfs.checkAttach runs them, so the chart's Job, a parent chart's workloads and every webhook
profile get the same refusals. Each takes the chart's context (or a dict with it under "context").
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
       writes them: past the limit the sidecar is OOM-killed, again at every restart. */ -}}
{{- if and (eq $vol.type "emptyDir") (eq (toString $vol.medium) "Memory") -}}
{{- $limits := (default (dict) $v.sidecar.resources).limits | default (dict) -}}
{{- if and (hasKey $limits "memory") (not (kindIs "invalid" $limits.memory)) -}}
{{- $mem := include "epochfs.quantityBytes" (dict "value" $limits.memory "name" "sidecar.resources.limits.memory") | float64 -}}
{{- $size := include "epochfs.bytes" $vol.size | atoi -}}
{{- if lt $mem (float64 $size) -}}
{{- fail (printf "cache.volume.medium=Memory: the cache is a tmpfs of cache.volume.size %s, whose pages count against the sidecar's memory, but sidecar.resources.limits.memory is %s: the sidecar would be OOM-killed once the cache outgrows it; raise sidecar.resources.limits.memory above cache.volume.size (plus the sidecar's own use, its request) or lower cache.volume.size" (toString $vol.size) (toString $limits.memory)) -}}
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
{{- range $i, $a := $paths -}}
{{- range $j, $b := $paths -}}
{{- if lt $i $j -}}
{{- $pa := clean (index $a 1) -}}{{- $pb := clean (index $b 1) -}}
{{- /* As folders: "/" stays "/", "/a" becomes "/a/", so /a and /ab are apart. */ -}}
{{- $fa := ternary $pa (printf "%s/" $pa) (eq $pa "/") -}}{{- $fb := ternary $pb (printf "%s/" $pb) (eq $pb "/") -}}
{{- if or (eq $fa $fb) (and (hasPrefix $fa $fb) (not (index $a 2))) (and (hasPrefix $fb $fa) (not (index $b 2))) -}}
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
{{- include "epochfs.checkEndpointUrl" $v.remote.endpointUrl -}}
{{- include "epochfs.checkSchedule" $v.sidecar.schedule -}}
{{- include "epochfs.checkMinSamples" $v.sidecar -}}
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

{{/* remote.endpointUrl (argument: the value): empty, or an http(s) URL with a host and, after a
     ':', a port of 0-65535, as urlsplit reads one. The message names the key, not the value: it
     may hold a password. */}}
{{- define "epochfs.checkEndpointUrl" -}}
{{- $url := trim (toString (default "" .)) -}}
{{- if $url -}}
{{- $why := "" -}}
{{- $re := "^(?i)https?://(?:[^/?#]*@)?(?:\\[[^\\]/?#@]*\\]|[^/?#@:\\[\\]]+)(?::([0-9]*))?(?:[/?#].*)?$" -}}
{{- if regexMatch "[\\s[:cntrl:]]" $url -}}
{{- $why = "it has spaces or control characters" -}}
{{- else if not (regexMatch "^(?i)https?://" $url) -}}
{{- $why = "it has no http:// or https:// scheme" -}}
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
