{{/*
The epochfs sidecar container: an init container with restartPolicy Always (native sidecar) or,
with sidecar.native=false, the first regular container. Settings reach `epochfs sidecar` as
EPOCHFS_* variables (sidecar/config.py); the image's ENTRYPOINT is `epochfs sidecar`.
*/}}
{{- define "epochfs.sidecarContainer" -}}
{{- $native := .Values.sidecar.native -}}
{{- $subPathExpr := include "epochfs.cacheSubPathExpr" . -}}
{{- $control := include "epochfs.controlDir" . -}}
{{- $creds := .Values.remote.credentials -}}
{{- $period := 2 -}}
- name: epochfs
  image: {{ include "epochfs.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  {{- if $native }}
  restartPolicy: Always
  {{- else }}
  # Legacy sidecar mode: run `epochfs sidecar` under a small shell that forwards SIGTERM and
  # stops it (SIGTERM: stop sampling, unmount, exit 0) once the trainer has left its exit file.
  command:
    - /bin/sh
    - -c
    - >-
      epochfs sidecar & pid=$!;
      trap 'kill -TERM $pid 2>/dev/null' TERM INT;
      while kill -0 $pid 2>/dev/null && [ ! -e {{ $control }}/trainer-exited ]; do sleep 2; done;
      kill -TERM $pid 2>/dev/null;
      wait $pid
  {{- end }}
  env:
    - name: EPOCHFS_REMOTE
      value: {{ .Values.remote.url | quote }}
    {{- with .Values.remote.endpointUrl }}
    - name: EPOCHFS_ENDPOINT_URL
      value: {{ . | quote }}
    {{- end }}
    {{- with .Values.remote.indexUrl }}
    - name: EPOCHFS_INDEX
      value: {{ . | quote }}
    {{- end }}
    - name: EPOCHFS_CACHE
      value: {{ .Values.cache.path | quote }}
    - name: EPOCHFS_MOUNT
      value: {{ .Values.sidecar.mountPath | quote }}
    # Epoch symlinks point into the read-only mount of the cache, which the trainer has too.
    - name: EPOCHFS_LINK_ROOT
      value: "{{ .Values.cache.readOnlyPath }}/objects"
    - name: EPOCHFS_CAPACITY
      value: {{ include "epochfs.capacity" . | quote }}
    {{- include "epochfs.shardIndexEnv" . | nindent 4 }}
    - name: EPOCHFS_SHARD_COUNT
      value: {{ .Values.nodes | quote }}
    - name: EPOCHFS_HEALTH_PORT
      value: {{ .Values.sidecar.healthPort | quote }}
    - name: EPOCHFS_SEED
      value: {{ .Values.sidecar.seed | quote }}
    - name: EPOCHFS_MIN_SAMPLES
      value: {{ .Values.sidecar.minSamples | quote }}
    - name: EPOCHFS_KEEP_EPOCHS
      value: {{ .Values.sidecar.keepEpochs | quote }}
    - name: EPOCHFS_CONCURRENCY
      value: {{ .Values.sidecar.concurrency | quote }}
    {{- with .Values.sidecar.schedule }}
    - name: EPOCHFS_SCHEDULE
      value: {{ . | quote }}
    {{- end }}
    - name: EPOCHFS_CUT_INTERVAL
      value: {{ .Values.sidecar.cutInterval | quote }}
    # The root filesystem is read-only: SDK caches and config lookups go to the /tmp emptyDir.
    - name: HOME
      value: /tmp
    - name: EPOCHFS_KUBE_REPORTING
      value: {{ ternary "1" "0" .Values.kubeReporting.enabled | quote }}
    {{- if .Values.kubeReporting.enabled }}
    - name: EPOCHFS_KUBE_STATUS_INTERVAL
      value: {{ .Values.kubeReporting.statusIntervalSeconds | quote }}
    - name: EPOCHFS_KUBE_ERROR_THRESHOLD
      value: {{ .Values.kubeReporting.remoteErrorThreshold | quote }}
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
    {{- with .Values.sidecar.env }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- if and $creds.secretName (eq $creds.mode "env") }}
  envFrom:
    - secretRef:
        name: {{ $creds.secretName }}
  {{- end }}
  ports:
    - name: metrics
      containerPort: {{ .Values.sidecar.healthPort }}
      protocol: TCP
  # Ready = mounted and epoch 0 can be cut. A native sidecar's startupProbe gates the trainer's start.
  startupProbe:
    httpGet:
      path: /readyz
      port: metrics
    periodSeconds: {{ $period }}
    timeoutSeconds: 2
    failureThreshold: {{ max 1 (div (int .Values.sidecar.startupTimeoutSeconds) $period) }}
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
  {{- with .Values.sidecar.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    # Required by mountPropagation Bidirectional (see values.yaml sidecar.runAsUser and docs).
    privileged: true
    runAsUser: {{ .Values.sidecar.runAsUser }}
    readOnlyRootFilesystem: true
    seccompProfile:
      type: RuntimeDefault
  volumeMounts:
    - name: epochfs-mount
      mountPath: {{ .Values.sidecar.mountPath }}
      mountPropagation: Bidirectional
    - name: epochfs-cache
      mountPath: {{ .Values.cache.path }}
      {{- with $subPathExpr }}
      subPathExpr: {{ . }}
      {{- end }}
    - name: epochfs-cache
      mountPath: {{ .Values.cache.readOnlyPath }}
      readOnly: true
      {{- with $subPathExpr }}
      subPathExpr: {{ . }}
      {{- end }}
    - name: tmp
      mountPath: /tmp
      subPath: sidecar
    {{- if not $native }}
    - name: epochfs-control
      mountPath: {{ $control }}
      readOnly: true
    {{- end }}
    {{- if and $creds.secretName (eq $creds.mode "files") }}
    - name: remote-credentials
      mountPath: {{ $creds.mountPath }}
      readOnly: true
    {{- end }}
    {{- if .Values.kubeReporting.enabled }}
    - name: kube-api-access
      mountPath: /var/run/secrets/kubernetes.io/serviceaccount
      readOnly: true
    {{- end }}
{{- end -}}
