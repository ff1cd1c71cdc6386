"""The reporter for this process, from its settings and what the cluster and downward API set.

Its own module because deciding *whether* to report (in a cluster, a service account, the pod
known, reporting on) and loading the in-cluster configuration is apart from reporting itself: a
:class:`~.reporter.DisabledReporter` with one log line that says why, else a
:class:`~.sender.KubeReporter` with no retries of urllib3's (its own back-off replaces them).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from epochfs.sidecar.kube.reporter import DisabledReporter, PodRef
from epochfs.sidecar.kube.sender import KubeReporter
from epochfs.sidecar.kube.status import STATUS_ANNOTATION

log = logging.getLogger("epochfs.kube")

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


def from_environment(
    environ: Mapping[str, str] | None = None,
    *,
    service_account_dir: Path = SERVICE_ACCOUNT_DIR,
    mount: str = "",
    reporting: bool = True,
    status_interval: float = 30.0,
    error_threshold: int = 20,
    **kwargs: Any,
) -> KubeReporter | DisabledReporter:
    """A reporter for this process: a :class:`KubeReporter` inside a cluster with reporting on,
    else a :class:`DisabledReporter` after one log line that says why.

    ``reporting``, ``status_interval`` and ``error_threshold`` are the sidecar's settings
    (``--kube-*``, validated by :mod:`epochfs.sidecar.config`); ``environ`` gives what the cluster
    and the downward API set (KUBERNETES_SERVICE_HOST, POD_NAME...). ``kwargs`` go to the constructor.
    """
    env = os.environ if environ is None else environ
    if not reporting:
        log.info("kubernetes reporting off (--kube-reporting / EPOCHFS_KUBE_REPORTING)")
        return DisabledReporter(reason="switched off")
    if status_interval <= 0 or error_threshold < 1:
        raise ValueError("status_interval must be positive and error_threshold at least 1")
    token = service_account_dir / "token"
    if not env.get("KUBERNETES_SERVICE_HOST") or not token.is_file():
        log.info("kubernetes reporting off: not running in a cluster (no KUBERNETES_SERVICE_HOST or no "
                 "service account token at %s)", token)
        return DisabledReporter(reason="not in a cluster")
    namespace = env.get("POD_NAMESPACE") or _read(service_account_dir / "namespace")
    name = env.get("POD_NAME", "")
    if not name or not namespace:
        log.warning("kubernetes reporting off: POD_NAME and POD_NAMESPACE must come from the downward "
                    "API (the Helm chart sets them)")
        return DisabledReporter(reason="pod unknown")
    from kubernetes import client as k8s
    from kubernetes.config.config_exception import ConfigException
    from kubernetes.config.incluster_config import InClusterConfigLoader

    configuration = k8s.Configuration()
    try:
        InClusterConfigLoader(token_filename=str(token), cert_filename=str(service_account_dir / "ca.crt"),
                              environ=env).load_and_set(configuration)
    except ConfigException as e:
        log.warning("kubernetes reporting off: in-cluster configuration failed: %s", e)
        return DisabledReporter(reason=f"configuration: {e}")
    configuration.retries = 0  # our own back-off and aggregation replace urllib3's retries
    pod = PodRef(name=name, namespace=namespace, uid=env.get("POD_UID") or None,
                 node=env.get("NODE_NAME") or None)
    log.info("kubernetes reporting on: Events and the %s annotation of pod %s/%s",
             STATUS_ANNOTATION, namespace, name)
    return KubeReporter(api_client=k8s.ApiClient(configuration), pod=pod, mount=mount,
                        status_interval=status_interval, error_threshold=error_threshold, **kwargs)


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""
