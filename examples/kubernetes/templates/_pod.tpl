{{/*
The pod of every example: your trainer, with epochfs attached by the epochfs chart's named
templates. ARG: dict with
  root     the parent chart's context ($)
  epochfs  what the epochfs templates take: .Subcharts.epochfs, or a dict of it under "context"
           with options (shardIndex, shardIndexFieldPath)
  name     the trainer container's name (a PyTorchJob needs "pytorch")
  restartPolicy  the pod's, or "" to leave it to the workload's controller
  env      more EnvVar of the trainer (a list)
  ports    ContainerPort of the trainer (a list)
*/}}
{{- define "example.podMetadata" -}}
{{- $e := .epochfs -}}
labels:
  {{- include "epochfs.podLabels" $e | nindent 2 }}
{{- with include "epochfs.podAnnotations" $e }}
annotations:
  {{- . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "example.podSpec" -}}
{{- $root := .root -}}
{{- $e := .epochfs -}}
{{- $ctx := $e -}}{{- if hasKey $e "context" }}{{ $ctx = $e.context }}{{ end -}}
{{- $ev := $ctx.Values -}}
{{- $t := $root.Values.trainer -}}
{{- with .restartPolicy }}
restartPolicy: {{ . }}
{{- end }}
# The sidecar's kube reporting runs as epochfs's ServiceAccount, its token projected into the
# sidecar alone (volume epochfs-kube-api-access): no token for the trainer.
serviceAccountName: {{ include "epochfs.serviceAccountName" $e }}
automountServiceAccountToken: false
enableServiceLinks: false
# Time for the sidecar to stop sampling and unmount after SIGTERM.
terminationGracePeriodSeconds: {{ $ev.terminationGracePeriodSeconds }}
securityContext:
  {{- toYaml $ev.podSecurityContext | nindent 2 }}
{{- if $ev.sidecar.native }}
initContainers:
  {{- include "epochfs.sidecarContainer" $e | nindent 2 }}
{{- end }}
containers:
  {{- if not $ev.sidecar.native }}
  {{- include "epochfs.sidecarContainer" $e | nindent 2 }}
  {{- end }}
  - name: {{ .name }}
    image: {{ $t.image }}
    imagePullPolicy: {{ $t.imagePullPolicy }}
    command:
      {{- include "epochfs.trainerCommand" (dict "context" $ctx "command" $t.command) | nindent 6 }}
    {{- with $t.args }}
    args:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    env:
      {{- include "epochfs.trainerEnv" $e | nindent 6 }}
      - name: HOME
        value: /tmp
      {{- with .env }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
      {{- with $t.env }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
    {{- with .ports }}
    ports:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    resources:
      {{- toYaml $t.resources | nindent 6 }}
    securityContext:
      {{- toYaml $t.securityContext | nindent 6 }}
    volumeMounts:
      {{- include "epochfs.trainerVolumeMounts" $e | nindent 6 }}
      - name: tmp
        mountPath: /tmp
      - name: dshm
        mountPath: /dev/shm
volumes:
  {{- include "epochfs.volumes" $e | nindent 2 }}
  - name: tmp
    emptyDir:
      sizeLimit: 1Gi
  - name: dshm
    emptyDir:
      medium: Memory
      sizeLimit: {{ $t.shmSize }}
{{- end -}}
