{{/*
The epochfs sidecar container: an init container with restartPolicy Always (native sidecar) or,
with sidecar.native=false, the first regular container. Settings reach `epochfs sidecar` as
EPOCHFS_* variables (sidecar/config.py); the image's ENTRYPOINT is `epochfs sidecar`.
It takes the chart's context or a dict with options (see _attach.tpl), so a parent chart can
include it in its own pods.
*/}}
{{- define "epochfs.sidecarContainer" -}}
{{- include "epochfs.checkAttach" . -}}
{{- $ctx := . -}}{{- if hasKey . "context" }}{{ $ctx = .context }}{{ end -}}
{{- $v := $ctx.Values -}}
{{- $native := $v.sidecar.native -}}
{{- $subPathExpr := include "epochfs.cacheSubPathExpr" $ctx -}}
{{- $control := include "epochfs.controlDir" $ctx -}}
{{- $creds := $v.remote.credentials -}}
{{- $period := 2 -}}
{{- $folder := include "epochfs.folderView" $ctx -}}
- name: epochfs
  image: {{ include "epochfs.image" $ctx | quote }}
  imagePullPolicy: {{ $v.image.pullPolicy }}
  # A refused setting (no such bucket, access denied) stops the sidecar with its reason in
  # /dev/termination-log; any other end shows the log's last lines: kubectl describe pod.
  terminationMessagePolicy: FallbackToLogsOnError
  {{- if $native }}
  restartPolicy: Always
  {{- else }}
  # Legacy sidecar mode: run `epochfs sidecar` under a small shell. The kubelet starts both
  # containers at once, so the shell stands in for the native sidecar's startupProbe: it polls
  # the sidecar's /readyz (mounted, and epoch 0 can be cut) and leaves `ready` in the control
  # folder, which the trainer's wrapper waits for; the poll goes direct to the loopback, never
  # through an HTTP_PROXY of sidecar.env (meant for the remote store). The kubelet also sends
  # SIGTERM to both at once: the shell then keeps the view up until the trainer has left its
  # exit file (it may be saving a checkpoint through the view), for at most {{ include "epochfs.legacyStopWait" $ctx }} s
  # (terminationGracePeriodSeconds less a margin to unmount in), and only then stops the sidecar
  # (SIGTERM: stop sampling, unmount, exit 0), as it does at once when the trainer's exit file
  # comes first. One SIGTERM only: a second tells the sidecar to kill its children and exit 143
  # at once. Waited for to its end (a trapped signal interrupts `wait`; `wait` asked once more at
  # the end, for a sidecar reaped while it was interrupted), so the shell exits with
  # the sidecar's own status, which it leaves in sidecar-exited (written whole: a temporary file
  # renamed) for the trainer's wrapper, which otherwise would wait for ever for a sidecar that
  # stopped before it was ready. The records of an earlier run of this container go first.
  command:
    - /bin/sh
    - -c
    - >-
      rm -f {{ $control }}/sidecar-exited {{ $control }}/ready;
      epochfs sidecar & pid=$!;
      stop() { [ -n "$sent" ] || kill -TERM $pid 2>/dev/null; sent=1; };
      term() { [ -n "$left" ] || left={{ include "epochfs.legacyStopWait" $ctx }}; };
      trap term TERM INT;
      while kill -0 $pid 2>/dev/null && [ ! -e {{ $control }}/trainer-exited ] && [ "${left:-1}" -gt 0 ]; do
      if [ ! -e {{ $control }}/ready ] && python3 -c "import os, urllib.request as u; u.build_opener(u.ProxyHandler({})).open('http://127.0.0.1:' + os.environ['EPOCHFS_HEALTH_PORT'] + '/readyz', timeout=2)" 2>/dev/null;
      then touch {{ $control }}/ready; fi;
      sleep 1;
      [ -z "$left" ] || left=$((left - 1));
      done;
      stop;
      wait $pid; rc=$?;
      while kill -0 $pid 2>/dev/null; do wait $pid; rc=$?; done;
      wait $pid 2>/dev/null; r=$?; [ $r -eq 127 ] || rc=$r;
      echo $rc > {{ $control }}/sidecar-exited.tmp && mv {{ $control }}/sidecar-exited.tmp {{ $control }}/sidecar-exited;
      exit $rc
  {{- end }}
  env:
    - name: EPOCHFS_REMOTE
      value: {{ $v.remote.url | quote }}
    {{- with $v.remote.endpointUrl }}
    - name: EPOCHFS_ENDPOINT_URL
      value: {{ . | quote }}
    {{- end }}
    {{- with $v.remote.indexUrl }}
    - name: EPOCHFS_INDEX
      value: {{ . | quote }}
    {{- end }}
    {{- with $v.remote.include }}
    - name: EPOCHFS_INCLUDE
      value: {{ . | quote }}
    {{- end }}
    {{- with $v.remote.exclude }}
    - name: EPOCHFS_EXCLUDE
      value: {{ . | quote }}
    {{- end }}
    - name: EPOCHFS_CACHE
      value: {{ $v.cache.path | quote }}
    # The view, in a subdirectory of the shared volume (the sidecar creates it).
    - name: EPOCHFS_MOUNT
      value: {{ include "epochfs.viewPath" $ctx | quote }}
    {{- if $folder }}
    # The folder view: the layout published as plain files, no FUSE and no privilege.
    - name: EPOCHFS_VIEW
      value: folder
    {{- end }}
    # Epoch symlinks point into the read-only mount of the cache, which the trainer has too.
    - name: EPOCHFS_LINK_ROOT
      value: "{{ include "epochfs.readOnlyPath" $ctx }}/objects"
    - name: EPOCHFS_CAPACITY
      value: {{ include "epochfs.capacity" $ctx | quote }}
    {{- include "epochfs.shardIndexEnv" . | nindent 4 }}
    {{- /* int64 on every whole number: Helm reads a values file's numbers as float64, which quote
         prints as 1e+06 from 1000000, and the sidecar refuses that as an integer. */}}
    - name: EPOCHFS_SHARD_COUNT
      value: {{ int64 $v.nodes | toString | quote }}
    - name: EPOCHFS_HEALTH_PORT
      value: {{ int64 $v.sidecar.healthPort | toString | quote }}
    {{- /* Set although it is the sidecar's default (/metrics on the health port): a pod with
         service links (the default; injected pods keep the pod's choice) gets
         EPOCHFS_METRICS_PORT=tcp://IP:PORT from a Service named epochfs-metrics in its namespace,
         which the sidecar refuses as a port, and a container's own variable wins over those. */}}
    - name: EPOCHFS_METRICS_PORT
      value: {{ int64 $v.sidecar.healthPort | toString | quote }}
    - name: EPOCHFS_SEED
      value: {{ int64 $v.sidecar.seed | toString | quote }}
    - name: EPOCHFS_MIN_SAMPLES
      value: {{ int64 $v.sidecar.minSamples | toString | quote }}
    - name: EPOCHFS_KEEP_EPOCHS
      value: {{ int64 $v.sidecar.keepEpochs | toString | quote }}
    - name: EPOCHFS_CONCURRENCY
      value: {{ int64 $v.sidecar.concurrency | toString | quote }}
    {{- with $v.sidecar.schedule }}
    - name: EPOCHFS_SCHEDULE
      value: {{ . | quote }}
    {{- end }}
    - name: EPOCHFS_CUT_INTERVAL
      value: {{ $v.sidecar.cutInterval | quote }}
    # The root filesystem is read-only: SDK caches and config lookups go to the /tmp emptyDir.
    - name: HOME
      value: /tmp
    - name: EPOCHFS_KUBE_REPORTING
      value: {{ ternary "1" "0" $v.kubeReporting.enabled | quote }}
    {{- if $v.kubeReporting.enabled }}
    - name: EPOCHFS_KUBE_STATUS_INTERVAL
      value: {{ int64 $v.kubeReporting.statusIntervalSeconds | toString | quote }}
    - name: EPOCHFS_KUBE_ERROR_THRESHOLD
      value: {{ int64 $v.kubeReporting.remoteErrorThreshold | toString | quote }}
    - name: POD_NAME
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
    - name: POD_NAMESPACE
      valueFrom:
        fieldRef:
          fieldPath: metadata.namespace
    - name: POD_UID
      valueFrom:
        fieldRef:
          fieldPath: metadata.uid
    - name: NODE_NAME
      valueFrom:
        fieldRef:
          fieldPath: spec.nodeName
    {{- end }}
    {{- if and $creds.secretName (eq $creds.mode "files") }}
    {{- range $name, $key := $creds.fileEnv }}
    - name: {{ $name }}
      value: "{{ $creds.mountPath }}/{{ $key }}"
    {{- end }}
    {{- end }}
    {{- with $v.sidecar.env }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- if and $creds.secretName (eq $creds.mode "env") }}
  envFrom:
    - secretRef:
        name: {{ $creds.secretName | quote }}
  {{- end }}
  ports:
    - name: metrics
      containerPort: {{ $v.sidecar.healthPort }}
      protocol: TCP
  # Ready = mounted (folder view: published) and epoch 0 can be cut. A native sidecar's startupProbe
  # gates the trainer's start.
  startupProbe:
    httpGet:
      path: /readyz
      port: metrics
    periodSeconds: {{ $period }}
    timeoutSeconds: 2
    failureThreshold: {{ max 1 (div (int $v.sidecar.startupTimeoutSeconds) $period) }}
  readinessProbe:
    httpGet:
      path: /readyz
      port: metrics
    periodSeconds: 10
    timeoutSeconds: 2
  livenessProbe:
    httpGet:
      path: /healthz
      port: metrics
    periodSeconds: 10
    timeoutSeconds: 5
    failureThreshold: 3
  {{- with include "epochfs.sidecarResources" $ctx }}
  resources:
    {{- . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- if $folder }}
    # The folder view needs no privilege: the Restricted Pod Security Standard.
    privileged: false
    allowPrivilegeEscalation: false
    capabilities:
      drop: [ALL]
    runAsNonRoot: true
    runAsUser: {{ include "epochfs.sidecarUser" $ctx }}
    {{- else }}
    # Required by mountPropagation Bidirectional (see values.yaml sidecar.runAsUser and docs).
    privileged: true
    runAsUser: {{ include "epochfs.sidecarUser" $ctx }}
    {{- end }}
    readOnlyRootFilesystem: true
    seccompProfile:
      type: RuntimeDefault
  volumeMounts:
    # The shared volume. FUSE view: mounted in its subdirectory, and Bidirectional propagation
    # carries that mount to the trainer. Folder view: the subdirectory holds plain files.
    - name: epochfs-mount
      mountPath: {{ $v.sidecar.mountPath | quote }}
      {{- if not $folder }}
      mountPropagation: Bidirectional
      {{- end }}
    - name: epochfs-cache
      mountPath: {{ $v.cache.path | quote }}
      {{- with $subPathExpr }}
      subPathExpr: {{ . }}
      {{- end }}
    - name: epochfs-cache
      mountPath: {{ include "epochfs.readOnlyPath" $ctx | quote }}
      readOnly: true
      {{- with $subPathExpr }}
      subPathExpr: {{ . }}
      {{- end }}
    - name: epochfs-tmp
      mountPath: /tmp
      subPath: sidecar
    {{- if not $native }}
    # Read-write: the wrapper leaves its exit record here.
    - name: epochfs-control
      mountPath: {{ $control | quote }}
    {{- end }}
    {{- if and $creds.secretName (eq $creds.mode "files") }}
    - name: epochfs-remote-credentials
      mountPath: {{ $creds.mountPath | quote }}
      readOnly: true
    {{- end }}
    {{- if $v.kubeReporting.enabled }}
    - name: epochfs-kube-api-access
      mountPath: /var/run/secrets/kubernetes.io/serviceaccount
      readOnly: true
    {{- end }}
    {{- with $v.sidecar.extraVolumeMounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end -}}
