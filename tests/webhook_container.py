"""The chart's admission webhook run for real by the container test: the pod of its Deployment,
as `helm template` renders it, in the image the test built, answering over HTTPS.

Why: calling ``decide()`` in-process leaves out what the API server actually talks to: the
server's command line and options, the profiles ConfigMap and TLS Secret mounted where the
Deployment mounts them, the certificate the chart made (verified, as the API server does, with
the MutatingWebhookConfiguration's caBundle for the Service's DNS name), and the AdmissionReview
and base64 JSONPatch encoding. Here the webhook's pod runs on the same private docker engine as
the pods it mutates (tests/container_pod.py), one replica, on the host network, its ports chosen
free by the test; its end is checked too (SIGTERM, exit 0).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common import free_port, wait_until
from container_engine import Engine
from container_pod import Pod
from helm_helpers import one
from pod_env import PodIdentity, PodObjects
from webhook.webhook_helpers import Client, admission_review

API_VERSION = "admission.k8s.io/v1"


def webhook_values(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with the webhook on, its HTTPS and metrics ports free ones of this machine (its
    pod shares the host network)."""
    return {**values, "webhook": {"enabled": True, "port": free_port(), "metricsPort": free_port()}}


@dataclass
class Webhook:
    """The running webhook pod and what the API server would use to call it."""

    pod: Pod
    client: Client
    path: str  # the configuration's path for a namespace without Pod Security enforcement

    def review(self, pod: dict[str, Any]) -> dict[str, Any]:
        """POST the pod's CREATE as the API server sends it; the AdmissionReview's response,
        checked to answer this request."""
        request = admission_review(pod, namespace=pod["metadata"]["namespace"])
        status, body = self.client.post(self.path, json.dumps(request).encode())
        assert status == 200, body
        answer: dict[str, Any] = json.loads(body)
        assert (answer["apiVersion"], answer["kind"]) == (API_VERSION, "AdmissionReview"), answer
        assert answer["response"]["uid"] == request["request"]["uid"], answer
        response: dict[str, Any] = answer["response"]
        return response

    def ready(self) -> bool:
        """GET /readyz over verified TLS (the Deployment's readinessProbe, which the pod runner
        does not emulate for regular containers); fails at once if the server exited."""
        [name] = self.pod.regular
        state = self.pod.state(name)
        if not state["Running"]:
            raise AssertionError(f"the webhook exited {state['ExitCode']}:\n{self.pod.logs(name)}")
        conn = self.client.connection()
        try:
            conn.request("GET", "/readyz")
            resp = conn.getresponse()
            resp.read()  # closing with the body unread would reset the connection
            return resp.status == 200
        except OSError:
            return False
        finally:
            conn.close()


def json_patch(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The allowed response's JSONPatch, decoded; [] when it carries none."""
    assert response["allowed"] is True, response.get("status")
    if "patch" not in response:
        assert "patchType" not in response, response
        return []
    assert response["patchType"] == "JSONPatch", response
    patch: list[dict[str, Any]] = json.loads(base64.b64decode(response["patch"], validate=True))
    return patch


def _named(objs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    [obj] = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    return obj


@contextmanager
def running_webhook(engine: Engine, objs: list[dict[str, Any]], root: Path) -> Iterator[Webhook]:
    """The webhook's Deployment of the rendered objects ``objs``, one pod of it, started and ready;
    on leaving (without an error), SIGTERM ends it with exit 0. Its containers are removed in any
    case."""
    hooks = one(objs, "MutatingWebhookConfiguration")["webhooks"]
    [hook] = [h for h in hooks if h["clientConfig"]["service"]["path"] == "/mutate"]
    service = hook["clientConfig"]["service"]
    deployment = _named(objs, "Deployment", service["name"])
    template = deployment["spec"]["template"]
    [container] = template["spec"]["containers"]
    https = _named(objs, "Service", service["name"])["spec"]["ports"]
    target = next(p["targetPort"] for p in https if p["port"] == service.get("port", 443))
    port = next(p["containerPort"] for p in container["ports"] if p["name"] == target)
    objects = PodObjects(
        config_maps={o["metadata"]["name"]: dict(o["data"]) for o in objs if o["kind"] == "ConfigMap"},
        secrets={o["metadata"]["name"]: {k: base64.b64decode(v).decode() for k, v in o["data"].items()}
                 for o in objs if o["kind"] == "Secret"},
    )
    identity = PodIdentity(name=f"{deployment['metadata']['name']}-0",
                           namespace=deployment["metadata"]["namespace"],
                           labels=dict(template["metadata"].get("labels") or {}),
                           annotations=dict(template["metadata"].get("annotations") or {}))
    pod = Pod(engine.docker, template["spec"], identity, root, objects=objects)
    # The API server dials the Service and checks the certificate for <service>.<namespace>.svc.
    client = Client(port, base64.b64decode(hook["clientConfig"]["caBundle"]),
                    server_name=f"{service['name']}.{service['namespace']}.svc")
    webhook = Webhook(pod, client, service["path"])
    try:
        pod.start(timeout=60)
        wait_until(webhook.ready, timeout=60, interval=0.1, what="webhook /readyz")
        yield webhook
        codes = pod.terminate()
        assert codes == {container["name"]: 0}, (codes, pod.logs(container["name"])[-4000:])
    finally:
        print(f"--- webhook log ---\n{pod.logs(container['name'])}")
        pod.cleanup()
