"""AdmissionReview v1: the request the API server sends and the response it expects.

https://kubernetes.io/docs/reference/access-authn-authz/extensible-admission-controllers/ -- the
response echoes the request's ``uid``; a mutation is ``patchType: JSONPatch`` with the patch as
base64 of its JSON; ``warnings`` (strings the API server passes on to the client) may come with
either; a refusal is ``allowed: false`` with ``status.code`` and ``status.message``,
which the client (kubectl, the Job controller's Events) shows as is.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from epochfs.sidecar.webhook.fields import cut

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
JSON = dict[str, Any]


class ReviewError(ValueError):
    """The body is not an AdmissionReview v1 request (answered 400, counted as an error)."""


@dataclass(frozen=True)
class Request:
    uid: str
    group: str
    version: str
    kind: str
    operation: str
    namespace: str
    sub_resource: str
    obj: Any

    @property
    def is_pod_creation(self) -> bool:
        return (
            (self.group, self.version, self.kind) == ("", "v1", "Pod")
            and self.operation == "CREATE"
            and not self.sub_resource
        )

    @property
    def who(self) -> str:
        """``namespace/name`` of the object (``generateName*`` before the API server names it) as
        a log line shows it: cut, since nothing has checked the name's length yet (the API server
        validates the object after the mutating webhooks)."""
        pod = self.obj if isinstance(self.obj, dict) else {}
        meta = pod.get("metadata")
        if not isinstance(meta, dict):
            meta = {}
        return f"{self.namespace}/{cut(str(meta.get('name') or str(meta.get('generateName', '')) + '*'))}"


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse(body: bytes) -> Request:
    """The request of an AdmissionReview v1 body; :class:`ReviewError` says what is wrong."""
    try:
        review = json.loads(body, parse_constant=_no_constants)
    except (ValueError, UnicodeDecodeError) as e:
        raise ReviewError(f"the body is not JSON: {e}") from None
    except RecursionError:  # a body of a few thousand nested arrays: a refusal, not a 500
        raise ReviewError("the body is not an AdmissionReview: JSON nested too deeply") from None
    if not isinstance(review, dict):
        raise ReviewError("the body is not a JSON object")
    if review.get("apiVersion") != API_VERSION or review.get("kind") != KIND:
        raise ReviewError(
            f"not an {API_VERSION} {KIND} (apiVersion {review.get('apiVersion')!r}, "
            f"kind {review.get('kind')!r}); the webhook configuration must list "
            "admissionReviewVersions: [v1]"
        )
    request = review.get("request")
    if not isinstance(request, dict):
        raise ReviewError("the AdmissionReview has no request")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise ReviewError("the request has no uid")
    kind = request.get("kind")
    if not isinstance(kind, dict):
        raise ReviewError("the request has no kind")

    def text(value: Any, what: str) -> str:
        if value is None:
            return ""
        if not isinstance(value, str):
            raise ReviewError(f"request.{what} is not a string")
        return value

    return Request(
        uid=uid,
        group=text(kind.get("group"), "kind.group"),
        version=text(kind.get("version"), "kind.version"),
        kind=text(kind.get("kind"), "kind.kind"),
        operation=text(request.get("operation"), "operation"),
        namespace=text(request.get("namespace"), "namespace"),
        sub_resource=text(request.get("subResource"), "subResource"),
        obj=request.get("object"),
    )


def response(
    uid: str,
    *,
    allowed: bool = True,
    patch: list[JSON] | None = None,
    message: str = "",
    code: int = 403,
    warnings: Sequence[str] = (),
) -> JSON:
    """An AdmissionReview v1 response: allowed (with a JSONPatch when ``patch``), or refused;
    ``warnings`` go to the client that creates the pod (kubectl prints them)."""
    answer: JSON = {"uid": uid, "allowed": allowed}
    if warnings:
        answer["warnings"] = list(warnings)
    if patch:
        answer["patchType"] = "JSONPatch"
        answer["patch"] = base64.b64encode(json.dumps(patch, separators=(",", ":")).encode()).decode("ascii")
    if not allowed:
        answer["status"] = {"code": code, "message": message}
    return {"apiVersion": API_VERSION, "kind": KIND, "response": answer}
