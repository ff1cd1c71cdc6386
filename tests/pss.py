"""The Restricted Pod Security Standard as a function over a pod, for the chart tests.

Written from the standard's definition (kubernetes.io/docs/concepts/security/pod-security-standards,
the Baseline controls plus the Restricted ones, as of Kubernetes 1.29-1.31). Every control the
standard names is checked on the pod spec, every container (init, regular and ephemeral) and the
pod's annotations; :func:`violations` returns one line per failed control, empty when the pod
passes. ``tests/deploy/test_helm_folderview.py`` shows that each control can fail.

Baseline: no hostProcess; no host namespaces (hostNetwork, hostPID, hostIPC); not privileged;
capabilities added only from the baseline set; no hostPath volumes; no host ports; AppArmor not
unconfined (annotations and ``appArmorProfile``); SELinux type only a container type, no custom
user or role; ``procMount`` Default; seccomp not Unconfined; only safe sysctls.
Restricted, on top: volume types only configMap, csi, downwardAPI, emptyDir, ephemeral,
persistentVolumeClaim, projected and secret; ``allowPrivilegeEscalation: false`` on every
container; ``runAsNonRoot: true`` (pod, or every container) and never false on a container;
``runAsUser`` never 0; seccomp RuntimeDefault or Localhost (pod, or every container); capabilities
drop ALL and add at most NET_BIND_SERVICE.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

BASELINE_CAPABILITIES = frozenset({
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
    "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
})
RESTRICTED_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})
SAFE_SYSCTLS = frozenset({
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
})
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
RESTRICTED_VOLUMES = frozenset({"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                                "persistentVolumeClaim", "projected", "secret"})
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
APPARMOR_OK_TYPES = frozenset({"RuntimeDefault", "Localhost"})
SECCOMP_OK_TYPES = frozenset({"RuntimeDefault", "Localhost"})


def pods_in(obj: Any, where: str = "") -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(where, metadata, pod spec) of every pod or pod template anywhere inside ``obj`` (a Pod, a
    Job's template, a JobSet's Job's template, a PyTorchJob's replica templates...)."""
    if isinstance(obj, dict):
        spec = obj.get("spec")
        if isinstance(spec, dict) and isinstance(spec.get("containers"), list):
            yield where or obj.get("kind", "pod"), obj.get("metadata") or {}, spec
        for key, value in obj.items():
            yield from pods_in(value, f"{where}.{key}" if where else str(key))
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            yield from pods_in(value, f"{where}[{i}]")


def _containers(spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(key) or []


def violations(spec: dict[str, Any], metadata: dict[str, Any] | None = None) -> list[str]:
    """The Restricted controls this pod fails (empty: it passes)."""
    out: list[str] = []
    pod_sc = spec.get("securityContext") or {}
    annotations = (metadata or {}).get("annotations") or {}
    containers = list(_containers(spec))

    # ---- Baseline
    if (pod_sc.get("windowsOptions") or {}).get("hostProcess"):
        out.append("pod: windowsOptions.hostProcess")
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            out.append(f"pod: {field}")
    for v in spec.get("volumes") or []:
        kinds = [k for k in v if k != "name"]
        if "hostPath" in kinds:
            out.append(f"volume {v['name']}: hostPath")
        for kind in kinds:
            if kind not in RESTRICTED_VOLUMES and kind != "hostPath":
                out.append(f"volume {v['name']}: type {kind} not allowed")
    for name, value in annotations.items():
        if name.startswith(APPARMOR_ANNOTATION) and value not in ("runtime/default",) \
                and not str(value).startswith("localhost/"):
            out.append(f"annotation {name}: AppArmor {value}")
    out += _selinux("pod", pod_sc)
    out += _apparmor("pod", pod_sc)
    for s in pod_sc.get("sysctls") or []:
        if s.get("name") not in SAFE_SYSCTLS:
            out.append(f"pod: sysctl {s.get('name')}")
    pod_seccomp = (pod_sc.get("seccompProfile") or {}).get("type")
    if pod_seccomp is not None and pod_seccomp not in SECCOMP_OK_TYPES:
        out.append(f"pod: seccompProfile {pod_seccomp}")
    if pod_sc.get("runAsUser") == 0:
        out.append("pod: runAsUser 0")
    pod_non_root = pod_sc.get("runAsNonRoot") is True

    for c in containers:
        name = f"container {c.get('name')}"
        sc = c.get("securityContext") or {}
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            out.append(f"{name}: windowsOptions.hostProcess")
        if sc.get("privileged"):
            out.append(f"{name}: privileged")
        caps = sc.get("capabilities") or {}
        for cap in caps.get("add") or []:
            if cap not in BASELINE_CAPABILITIES:
                out.append(f"{name}: adds capability {cap} (not even Baseline)")
            elif cap not in RESTRICTED_CAPABILITIES:
                out.append(f"{name}: adds capability {cap}")
        for port in c.get("ports") or []:
            if port.get("hostPort"):
                out.append(f"{name}: hostPort {port['hostPort']}")
        out += _selinux(name, sc)
        out += _apparmor(name, sc)
        if sc.get("procMount", "Default") != "Default":
            out.append(f"{name}: procMount {sc['procMount']}")
        # ---- Restricted
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{name}: allowPrivilegeEscalation is not false")
        if sc.get("runAsNonRoot") is False or not (pod_non_root or sc.get("runAsNonRoot") is True):
            out.append(f"{name}: runAsNonRoot is not true")
        if sc.get("runAsUser") == 0:
            out.append(f"{name}: runAsUser 0")
        seccomp = (sc.get("seccompProfile") or {}).get("type")
        if seccomp is not None and seccomp not in SECCOMP_OK_TYPES:
            out.append(f"{name}: seccompProfile {seccomp}")
        if seccomp is None and pod_seccomp is None:
            out.append(f"{name}: no seccompProfile (pod or container)")
        if "ALL" not in (caps.get("drop") or []):
            out.append(f"{name}: capabilities do not drop ALL")
    return out


def _selinux(where: str, sc: dict[str, Any]) -> list[str]:
    opts = sc.get("seLinuxOptions") or {}
    out = []
    if opts.get("type", "") not in SELINUX_TYPES:
        out.append(f"{where}: seLinuxOptions.type {opts['type']}")
    for field in ("user", "role"):
        if opts.get(field):
            out.append(f"{where}: seLinuxOptions.{field}")
    return out


def _apparmor(where: str, sc: dict[str, Any]) -> list[str]:
    kind = (sc.get("appArmorProfile") or {}).get("type")
    return [] if kind is None or kind in APPARMOR_OK_TYPES else [f"{where}: appArmorProfile {kind}"]
