{{/*
Named templates that attach epochfs to a pod: the chart's own Job uses them, and so can a parent
chart for its own workloads (a Pod, a Deployment, a Kubeflow PyTorchJob, a JobSet...) with
job.enabled=false. docs/kubernetes.md ("Attach epochfs to your own workloads") and
examples/kubernetes/ show them in use.

Every one takes ARG, either
  * the epochfs chart's context: "." inside this chart, .Subcharts.epochfs in a parent chart
    (.Subcharts.<alias> for an aliased dependency), or
  * a dict with that context under "context" and options:
      shardIndex           the pod's shard, a fixed number (e.g. 0 for a single Pod)
      shardIndexFieldPath  the pod's shard from the downward API, e.g.
                           "metadata.labels['training.kubeflow.org/replica-index']"
      command              epochfs.trainerCommand only: the trainer's command (a list)
    Without a shard option the shard is 0 for nodes=1 and the Indexed Job's completion index
    (annotation batch.kubernetes.io/job-completion-index) for nodes>1, which is also what a
    JobSet's Indexed Jobs carry. The shard count is always the chart's `nodes`.

  epochfs.sidecarContainer     a list holding the sidecar container: put it under initContainers
                               (sidecar.native=true, the default) or containers (false)
  epochfs.volumes              the volumes the sidecar and the trainer mounts need (a list)
  epochfs.trainerVolumeMounts  the trainer's mounts: the view (read-only) and the cache (read-only)
  epochfs.trainerEnv           the trainer's EPOCHFS_* environment (EPOCHFS_MOUNT: the view)
  epochfs.trainerCommand       the trainer's command, wrapped for sidecar.native=false (a list)
  epochfs.podLabels            the pod labels the metrics Service and helm test select (a map)
  epochfs.podAnnotations       prometheus.io/* scrape annotations and podAnnotations (a map)
  epochfs.serviceAccountName   the ServiceAccount the sidecar's kube reporting is bound to
  epochfs.viewPath             where trainers find epoch-N/: <sidecar.mountPath>/view
  epochfs.folderView           "true" with sidecar.view=folder (the folder view: no FUSE, no
                               privilege; docs/folderview.md), empty with the FUSE view
*/}}

{{/* The view: "true" when the sidecar publishes the epochs as plain files (sidecar.view=folder). */}}
{{- define "epochfs.folderView" -}}
{{- $ctx := . -}}{{- if hasKey . "context" }}{{ $ctx = .context }}{{ end -}}
{{- if eq (toString $ctx.Values.sidecar.view) "folder" }}true{{ end -}}
{{- end -}}

{{/* The sidecar's user: sidecar.runAsUser, else root for the FUSE view (mounting for another user
     needs CAP_SYS_ADMIN) and the image's user 10001 for the folder view. */}}
{{- define "epochfs.sidecarUser" -}}
{{- $ctx := . -}}{{- if hasKey . "context" }}{{ $ctx = .context }}{{ end -}}
{{- if not (kindIs "invalid" $ctx.Values.sidecar.runAsUser) -}}
{{- int64 $ctx.Values.sidecar.runAsUser -}}
{{- else if include "epochfs.folderView" $ctx -}}
10001
{{- else -}}
0
{{- end -}}
{{- end -}}

{{/* Where the cache volume is mounted read-only in both containers (epoch entries are symlinks
     into <it>/objects): cache.readOnlyPath, else /var/cache/epochfs-ro for the FUSE view and
     /epochfs-ro for the folder view, whose entries are real symlinks on the shared volume: with
     the short path a target (link root + 36 characters) stays under 60 bytes, which ext4 keeps in
     the inode, where a longer one takes a 4 KiB block per entry (400 MB for 100k entries). */}}
{{- define "epochfs.readOnlyPath" -}}
{{- $ctx := . -}}{{- if hasKey . "context" }}{{ $ctx = .context }}{{ end -}}
{{- if $ctx.Values.cache.readOnlyPath -}}
{{- trimSuffix "/" $ctx.Values.cache.readOnlyPath -}}
{{- else if include "epochfs.folderView" $ctx -}}
/epochfs-ro
{{- else -}}
/var/cache/epochfs-ro
{{- end -}}
{{- end -}}

{{/* The view: a subdirectory of the shared mount volume, which the sidecar creates. Never the
     volume's own mount point: that is a mount point already (the kubelet's), and after a FUSE
     server restart a new FUSE mount in the subdirectory reaches trainers that started earlier.
     The folder view publishes into the same subdirectory. */}}
{{- define "epochfs.viewPath" -}}
{{- $ctx := . -}}{{- if hasKey . "context" }}{{ $ctx = .context }}{{ end -}}
{{- printf "%s/view" (trimSuffix "/" $ctx.Values.sidecar.mountPath) -}}
{{- end -}}

{{/* What every attached pod needs: a remote, and a cluster that runs native sidecars. */}}
{{- define "epochfs.checkAttach" -}}
{{- $ctx := . -}}{{- $opts := dict -}}
{{- if hasKey . "context" }}{{ $ctx = .context }}{{ $opts = . }}{{ end -}}
{{- if not $ctx.Values.remote.url -}}
{{- fail "remote.url is required (s3://bucket/prefix, gs://..., https://..., file://...)" -}}
{{- end -}}
{{- if and $ctx.Values.sidecar.native (semverCompare "<1.29.0-0" $ctx.Capabilities.KubeVersion.Version) -}}
{{- fail (printf "native sidecars (init containers with restartPolicy Always) need Kubernetes 1.29 or newer, this cluster is %s: set sidecar.native=false" $ctx.Capabilities.KubeVersion.Version) -}}
{{- end -}}
{{- if include "epochfs.folderView" $ctx -}}
{{- if eq $ctx.Values.cache.volume.type "hostPath" -}}
{{- fail "sidecar.view=folder is for clusters that enforce the Baseline or Restricted Pod Security Standard, which forbid hostPath volumes: use cache.volume.type emptyDir or ephemeral (or the FUSE view)" -}}
{{- end -}}
{{- if eq (include "epochfs.sidecarUser" $ctx) "0" -}}
{{- fail "sidecar.view=folder runs the sidecar as a non-root user: set sidecar.runAsUser to a non-zero uid, or leave it empty (10001, the image's user)" -}}
{{- end -}}
{{- else if ne (toString $ctx.Values.sidecar.view) "fuse" -}}
{{- fail (printf "sidecar.view: %q is not one of fuse, folder" (toString $ctx.Values.sidecar.view)) -}}
{{- else -}}
{{- include "epochfs.checkFuseUser" $ctx -}}
{{- end -}}
{{- include "epochfs.checkCache" $ctx -}}
{{- include "epochfs.checkPaths" $ctx -}}
{{- include "epochfs.checkSidecarValues" $ctx -}}
{{- if and (hasKey $opts "shardIndex") (hasKey $opts "shardIndexFieldPath") -}}
{{- fail "epochfs: give shardIndex or shardIndexFieldPath, not both" -}}
{{- end -}}
{{- if hasKey $opts "shardIndex" -}}
{{- $i := toString $opts.shardIndex -}}
{{- if or (not (regexMatch "^[0-9]+$" $i)) (ge (atoi $i) (int $ctx.Values.nodes)) -}}
{{- fail (printf "epochfs: shardIndex %s is not one of 0..%d (nodes=%d)" $i (sub (int $ctx.Values.nodes) 1) (int $ctx.Values.nodes)) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The FUSE view's sidecar user against what can start and mount. As root (the default) it is
     a root container, which the kubelet refuses to start under the pod's runAsNonRoot: true
     (CreateContainerConfigError), so the trainer never starts: the webhook refuses such a pod
     with the same words. As another user it mounts through the image's setuid fusermount3,
     which needs the user in the image's /etc/passwd (root and epochfs, 10001): any other uid
     fails every mount ("could not determine username") until the startupProbe gives up. */}}
{{- define "epochfs.checkFuseUser" -}}
{{- $user := include "epochfs.sidecarUser" . -}}
{{- if and (eq $user "0") (default (dict) .Values.podSecurityContext).runAsNonRoot -}}
{{- fail "podSecurityContext.runAsNonRoot: true with the FUSE view: its sidecar runs as root in a privileged container (mounting FUSE for the trainer needs CAP_SYS_ADMIN), which the kubelet refuses to start under the pod's runAsNonRoot: true; set runAsNonRoot on the trainer container instead (trainer.securityContext, where it is on by default), or use sidecar.view=folder (no privilege: it passes the Restricted level)" -}}
{{- end -}}
{{- if not (has $user (list "0" "10001")) -}}
{{- fail (printf "sidecar.runAsUser %s with the FUSE view: a non-root sidecar mounts through the image's fusermount3, which needs the user in the image's /etc/passwd, and that holds only 0 (root) and 10001 (epochfs); any other uid never mounts (fusermount3: could not determine username) and the startupProbe restarts the sidecar until it gives up. Set sidecar.runAsUser to 0 (or leave it empty) or 10001, or use sidecar.view=folder, which runs under any non-zero uid" $user) -}}
{{- end -}}
{{- end -}}

{{/* EPOCHFS_SHARD_INDEX, in both containers: from the options, else 0 for one node, else the
     Indexed Job's completion index. */}}
{{- define "epochfs.shardIndexEnv" -}}
{{- $ctx := . -}}{{- $opts := dict -}}
{{- if hasKey . "context" }}{{ $ctx = .context }}{{ $opts = . }}{{ end -}}
- name: EPOCHFS_SHARD_INDEX
{{- if hasKey $opts "shardIndex" }}
  value: {{ toString $opts.shardIndex | quote }}
{{- else if hasKey $opts "shardIndexFieldPath" }}
  valueFrom:
    fieldRef:
      fieldPath: {{ $opts.shardIndexFieldPath }}
{{- else if include "epochfs.indexed" $ctx }}
  valueFrom:
    fieldRef:
      fieldPath: metadata.annotations['batch.kubernetes.io/job-completion-index']
{{- else }}
  value: "0"
{{- end }}
{{- end -}}

{{- define "epochfs.podLabels" -}}
{{- $ctx := . -}}{{- if hasKey . "context" }}{{ $ctx = .context }}{{ end -}}
{{- $own := merge (fromYaml (include "epochfs.selectorLabels" $ctx)) (dict "app.kubernetes.io/component" "training") -}}
{{- toYaml (merge $own $ctx.Values.podLabels $ctx.Values.commonLabels) -}}
{{- end -}}

{{- define "epochfs.podAnnotations" -}}
{{- $ctx := . -}}{{- if hasKey . "context" }}{{ $ctx = .context }}{{ end -}}
{{- $ann := dict -}}
{{- if $ctx.Values.metrics.enabled -}}
{{- $ann = dict "prometheus.io/scrape" "true" "prometheus.io/port" (toString $ctx.Values.sidecar.healthPort) "prometheus.io/path" "/metrics" -}}
{{- end -}}
{{- $ann = merge $ann $ctx.Values.podAnnotations -}}
{{- with $ann }}{{ toYaml . }}{{ end -}}
{{- end -}}

{{/* The volumes of an attached pod. Every name of the chart's starts with epochfs- so that none
     clashes with the workload's own volumes; sidecar.extraVolumes (the sidecar's own, e.g. the
     dataset of a file:// remote) come last, under the names the user gave them. */}}
{{- define "epochfs.volumes" -}}
{{- $ctx := . -}}{{- if hasKey . "context" }}{{ $ctx = .context }}{{ end -}}
{{- $v := $ctx.Values -}}
{{- $creds := $v.remote.credentials -}}
- name: epochfs-mount
  emptyDir: {}
{{- if eq $v.cache.volume.type "emptyDir" }}
- name: epochfs-cache
  emptyDir:
    sizeLimit: {{ $v.cache.volume.size }}
    {{- with $v.cache.volume.medium }}
    medium: {{ . }}
    {{- end }}
{{- else if eq $v.cache.volume.type "hostPath" }}
- name: epochfs-cache
  hostPath:
    path: {{ $v.cache.volume.hostPath.path | quote }}
    type: DirectoryOrCreate
{{- else if eq $v.cache.volume.type "ephemeral" }}
- name: epochfs-cache
  ephemeral:
    volumeClaimTemplate:
      metadata:
        labels:
          {{- $labels := merge (fromYaml (include "epochfs.selectorLabels" $ctx)) (dict "app.kubernetes.io/component" "cache") }}
          {{- toYaml (merge $labels $v.commonLabels) | nindent 10 }}
      spec:
        accessModes:
          {{- toYaml $v.cache.volume.ephemeral.accessModes | nindent 10 }}
        {{- with $v.cache.volume.ephemeral.storageClassName }}
        storageClassName: {{ . | quote }}
        {{- end }}
        resources:
          requests:
            storage: {{ $v.cache.volume.size }}
{{- else }}
{{- fail (printf "cache.volume.type: %q is not one of emptyDir, hostPath, ephemeral" $v.cache.volume.type) }}
{{- end }}
# The sidecar's /tmp (its root filesystem is read-only); the chart's Job gives the trainer a
# subPath of it too, its HOME: trainer.tmpSizeLimit bounds both (past it the pod is evicted).
- name: epochfs-tmp
  emptyDir:
    sizeLimit: {{ $v.trainer.tmpSizeLimit | default "1Gi" }}
{{- if not $v.sidecar.native }}
- name: epochfs-control
  emptyDir:
    sizeLimit: 1Mi
{{- end }}
{{- if and $creds.secretName (eq $creds.mode "files") }}
- name: epochfs-remote-credentials
  secret:
    secretName: {{ $creds.secretName | quote }}
    defaultMode: 0400
{{- end }}
{{- if $v.kubeReporting.enabled }}
# What automountServiceAccountToken would mount, given to the sidecar only.
- name: epochfs-kube-api-access
  projected:
    defaultMode: 0444
    sources:
      - serviceAccountToken:
          path: token
          expirationSeconds: 3607
      - configMap:
          name: kube-root-ca.crt
          items:
            - key: ca.crt
              path: ca.crt
      - downwardAPI:
          items:
            - path: namespace
              fieldRef:
                apiVersion: v1
                fieldPath: metadata.namespace
{{- end }}
{{- with $v.sidecar.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The trainer's mounts: the shared mount volume (read-only; the view is its subdirectory view/,
     which reaches the trainer by HostToContainer propagation, or as plain files with the folder
     view) and the cache volume read-only at the path the view's symlinks point into. */}}
{{- define "epochfs.trainerVolumeMounts" -}}
{{- $ctx := . -}}{{- if hasKey . "context" }}{{ $ctx = .context }}{{ end -}}
{{- $v := $ctx.Values -}}
{{- $subPathExpr := include "epochfs.cacheSubPathExpr" $ctx -}}
- name: epochfs-mount
  mountPath: {{ $v.sidecar.mountPath | quote }}
  {{- if not (include "epochfs.folderView" $ctx) }}
  mountPropagation: HostToContainer
  {{- end }}
  readOnly: true
- name: epochfs-cache
  mountPath: {{ include "epochfs.readOnlyPath" $ctx | quote }}
  readOnly: true
  {{- with $subPathExpr }}
  subPathExpr: {{ . }}
  {{- end }}
{{- if not $v.sidecar.native }}
- name: epochfs-control
  mountPath: {{ include "epochfs.controlDir" $ctx | quote }}
{{- end }}
{{- end -}}

{{/* The trainer's environment: where the view and the read-only cache are, where the torch client
     reports to its own sidecar, and the pod's shard. */}}
{{- define "epochfs.trainerEnv" -}}
{{- $ctx := . -}}{{- if hasKey . "context" }}{{ $ctx = .context }}{{ end -}}
- name: EPOCHFS_MOUNT
  value: {{ include "epochfs.viewPath" $ctx | quote }}
- name: EPOCHFS_CACHE
  value: {{ include "epochfs.readOnlyPath" $ctx | quote }}
- name: EPOCHFS_REPORT_URL  # the torch client reports deliveries and waits to the sidecar
  value: "http://127.0.0.1:{{ $ctx.Values.sidecar.healthPort }}/v1/client-report"
{{ include "epochfs.shardIndexEnv" . }}
{{- end -}}

{{/* The trainer's command (option "command"). With sidecar.native=false it is wrapped in /bin/sh
     (the trainer image needs one): wait for the sidecar's `ready` file in the control folder
     (its shell leaves it once /readyz answers: the view mounted and epoch 0 ready to cut, what a
     native sidecar's startupProbe waits for), run the command (the container's args follow it),
     then leave the file that tells the sidecar to stop, also when the pod's SIGTERM comes before
     the trainer started; the exit code is the trainer's. The shell is the container's PID 1,
     which the kernel hands only the signals it has a handler for: it traps the pod's SIGTERM
     (and SIGINT) and forwards SIGTERM to the trainer (a background job of a shell without job
     control ignores SIGINT), then waits for the trainer to its end (a trapped signal interrupts
     `wait`), and asks `wait` once more at the end: a trainer reaped while the signal interrupted
     `wait` is gone before `kill -0` looks, and only `wait` still has its status (the wrapper
     exited 143, not the trainer's 5, under load); a signal between the trainer's start and `pid=$!` finds it by `$!`, set as the job
     starts (it exited 143 and left the trainer to the namespace's SIGKILL, seen once under
     load). While it waits for the sidecar, the sidecar's exit record (sidecar-exited, its
     status) ends the wait with that status: a sidecar that stopped before it was ready (a
     refused setting) never gets ready. */}}
{{- define "epochfs.trainerCommand" -}}
{{- $ctx := .context -}}
{{- $command := default (list) .command -}}
{{- if $ctx.Values.sidecar.native -}}
{{- with $command }}{{ toYaml . }}{{ end -}}
{{- else -}}
{{- if not $command -}}
{{- fail "sidecar.native=false wraps trainer.command (to wait until the sidecar is ready and stop the sidecar at the end): set trainer.command" -}}
{{- end -}}
- /bin/sh
- -c
{{- $control := include "epochfs.controlDir" $ctx }}
- >-
  pid=;
  stop() { p=${pid:-$!}; if [ -n "$p" ]; then kill -TERM $p 2>/dev/null; else touch {{ $control }}/trainer-exited; exit 143; fi; };
  trap stop TERM INT;
  until [ -e {{ $control }}/ready ]; do
  if [ -e {{ $control }}/sidecar-exited ]; then
  rc=$(cat {{ $control }}/sidecar-exited);
  echo "epochfs: the sidecar exited with status $rc before it was ready (the view mounted at $EPOCHFS_MOUNT and epoch 0 ready to cut); its log says why: kubectl logs <this pod> -c epochfs" >&2;
  [ "$rc" -gt 0 ] 2>/dev/null || rc=1;
  exit $rc;
  fi;
  sleep 1;
  done;
  trap 'touch {{ $control }}/trainer-exited' EXIT;
  "$@" & pid=$!;
  wait $pid; rc=$?;
  while kill -0 $pid 2>/dev/null; do wait $pid; rc=$?; done;
  wait $pid 2>/dev/null; r=$?; [ $r -eq 127 ] || rc=$r;
  exit $rc
- epochfs-trainer
{{ toYaml $command }}
{{- end -}}
{{- end -}}
