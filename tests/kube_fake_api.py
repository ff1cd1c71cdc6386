"""A small fake Kubernetes API server on 127.0.0.1 for the reporting tests.

It speaks enough of the real protocol for sidecar/kube/: POST and PATCH of core/v1 Events,
merge-PATCH of a Pod. Each request is checked as the API server would: the bearer token, the
path, the verb, the content type, and the body (or the object a patch produces) validated in
strict mode against the Kubernetes OpenAPI schema by kubernetes-validate. Anything else is
answered 404/405/415/422 and recorded as a protocol error, which the tests assert never happens.

Faults are queued with :meth:`FakeApiServer.fail_next` (HTTP status codes, or ``"hang"`` to hold
the request past the client's timeout), so each API error can be injected on demand. With
``tls=True`` it serves HTTPS with a freshly generated CA, as a cluster does, so the in-cluster
configuration path (token file, CA file, ``KUBERNETES_SERVICE_HOST``) is exercised unchanged.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import re
import ssl
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import kubernetes_validate

K8S_VERSION = "1.29.0"
EVENTS = re.compile(r"^/api/v1/namespaces/(?P<ns>[a-z0-9-]+)/events(?:/(?P<name>[^/?]+))?$")
POD = re.compile(r"^/api/v1/namespaces/(?P<ns>[a-z0-9-]+)/pods/(?P<name>[^/?]+)$")
Answer = tuple[int, dict[str, Any], dict[str, str]]  # status, JSON body, extra headers
PATCH_TYPES = ("application/merge-patch+json", "application/strategic-merge-patch+json")


@dataclass
class Request:
    verb: str
    path: str
    content_type: str
    body: Any
    answered: int


@dataclass
class FakeApiServer:
    token: str = "test-token"
    namespace: str = "training"
    pod_name: str = "mnist-0-abcde"
    pod_uid: str = "0b7e6d0c-4c1e-4b7b-9d3c-1f2e3d4c5b6a"
    tls_dir: Path | None = None
    events: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    protocol_errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.pod: dict[str, Any] = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": self.pod_name, "namespace": self.namespace, "uid": self.pod_uid,
                         "annotations": {"kubectl.kubernetes.io/default-container": "trainer"}},
            "spec": {"containers": [{"name": "trainer", "image": "pytorch/pytorch:2.5.1"}]},
        }
        self._faults: list[int | str] = []
        self._lock = threading.Lock()
        self._release = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self.ca_file: Path | None = None
        if self.tls_dir is not None:
            self.ca_file = _make_tls(self.tls_dir)
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(self.tls_dir / "server.crt", self.tls_dir / "server.key")
            self._server.socket = ctx.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    # ------------------------------------------------------------------ control
    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"{'https' if self.tls_dir else 'http'}://127.0.0.1:{self.port}"

    def start(self) -> FakeApiServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def fail_next(self, *faults: int | str) -> None:
        """Answer the next requests with these HTTP statuses, or hold them (``"hang"``)."""
        with self._lock:
            self._faults.extend(faults)

    def calls(self) -> list[tuple[str, str]]:
        """(verb, path) of every request answered 2xx, in order."""
        return [(r.verb, r.path) for r in self.requests if 200 <= r.answered < 300]

    def rbac_calls(self) -> set[tuple[str, str, str]]:
        """The (group, resource, verb) an RBAC authorizer would check for the requests seen."""
        out = set()
        for r in self.requests:
            resource = "events" if EVENTS.match(r.path) else "pods" if POD.match(r.path) else "?"
            out.add(("", resource, {"POST": "create", "PATCH": "patch"}.get(r.verb, r.verb.lower())))
        return out

    def annotation(self) -> dict[str, Any] | None:
        raw = self.pod["metadata"].get("annotations", {}).get("epochfs.io/status")
        return json.loads(raw) if raw else None

    def event(self, reason: str) -> dict[str, Any]:
        found = [e for e in self.events.values() if e["reason"] == reason]
        assert len(found) == 1, f"expected one {reason} Event, got {len(found)}"
        return found[0]

    # ------------------------------------------------------------------ serving
    def _next_fault(self) -> int | str | None:
        with self._lock:
            return self._faults.pop(0) if self._faults else None

    def handle(self, verb: str, path: str, headers: Any, raw: bytes) -> Answer:
        auth = headers.get("Authorization", "")
        if auth.lower() != f"bearer {self.token}":
            self.protocol_errors.append(f"{verb} {path}: bad Authorization {auth!r}")
            return 401, _status(401, "Unauthorized"), {}
        ctype = headers.get("Content-Type", "").split(";")[0].strip()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            self.protocol_errors.append(f"{verb} {path}: body is not JSON")
            return 400, _status(400, "BadRequest"), {}
        fault = self._next_fault()
        if fault == "hang":
            self._release.wait(timeout=30)
            return 504, _status(504, "Timeout"), {}
        if isinstance(fault, int):
            headers_out = {"Retry-After": "7"} if fault == 429 else {}
            return fault, _status(fault, "Injected"), headers_out
        m_events, m_pod = EVENTS.match(path.split("?")[0]), POD.match(path.split("?")[0])
        if (m_events and m_events["ns"] != self.namespace) or (m_pod and m_pod["ns"] != self.namespace):
            self.protocol_errors.append(f"{verb} {path}: wrong namespace")
            return 403, _status(403, "Forbidden"), {}
        if m_events and verb == "POST" and not m_events["name"]:
            return self._create_event(path, ctype, body)
        if m_events and verb == "PATCH" and m_events["name"]:
            return self._patch(path, ctype, body, self.events.get(m_events["name"]))
        if m_pod and verb == "PATCH":
            if m_pod["name"] != self.pod_name:
                self.protocol_errors.append(f"{verb} {path}: not the sidecar's own pod")
                return 404, _status(404, "NotFound"), {}
            return self._patch(path, ctype, body, self.pod)
        self.protocol_errors.append(f"{verb} {path}: no such API call")
        return 405, _status(405, "MethodNotAllowed"), {}

    def _validate(self, path: str, obj: dict[str, Any]) -> str | None:
        try:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            return f"{path}: invalid {obj.get('kind')}: {e}"
        return None

    def _create_event(self, path: str, ctype: str, body: Any) -> Answer:
        if ctype != "application/json" or not isinstance(body, dict):
            self.protocol_errors.append(f"POST {path}: content type {ctype!r}")
            return 415, _status(415, "UnsupportedMediaType"), {}
        problem = self._validate(path, body)
        ref = body.get("involvedObject", {})
        about = (ref.get("kind"), ref.get("name"), ref.get("uid"))
        if not problem and about != ("Pod", self.pod_name, self.pod_uid):
            problem = f"POST {path}: event about {ref}, not the sidecar's pod"
        if not problem and body["metadata"].get("namespace") != self.namespace:
            problem = f"POST {path}: event namespace {body['metadata'].get('namespace')}"
        if problem:
            self.protocol_errors.append(problem)
            return 422, _status(422, "Invalid"), {}
        name = body["metadata"]["name"]
        if name in self.events:
            return 409, _status(409, "AlreadyExists"), {}
        stored = copy.deepcopy(body)
        stored["metadata"]["resourceVersion"] = "1"
        now = dt.datetime.now(dt.timezone.utc)
        stored["metadata"]["creationTimestamp"] = now.strftime("%Y-%m-%dT%H:%M:%SZ")
        self.events[name] = stored
        return 201, stored, {}

    def _patch(self, path: str, ctype: str, body: Any, target: dict[str, Any] | None) -> Answer:
        if ctype not in PATCH_TYPES or not isinstance(body, dict):
            self.protocol_errors.append(f"PATCH {path}: content type {ctype!r} with {type(body).__name__}")
            return 415, _status(415, "UnsupportedMediaType"), {}
        if target is None:
            return 404, _status(404, "NotFound"), {}
        merged = _merge(copy.deepcopy(target), body)
        problem = self._validate(path, merged)
        if problem:
            self.protocol_errors.append(problem)
            return 422, _status(422, "Invalid"), {}
        if merged["metadata"].get("name") != target["metadata"]["name"]:
            self.protocol_errors.append(f"PATCH {path}: renames the object")
            return 422, _status(422, "Invalid"), {}
        target.clear()
        target.update(merged)
        target["metadata"]["resourceVersion"] = str(int(target["metadata"].get("resourceVersion", "1")) + 1)
        return 200, target, {}


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    if not isinstance(target, dict):
        target = {}
    for k, v in patch.items():
        if v is None:
            target.pop(k, None)
        else:
            target[k] = _merge(target.get(k), v)
    return target


def _status(code: int, reason: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code,
            "message": f"fake API server: {reason}"}


def _handler(api: FakeApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            code, payload, extra = api.handle(self.command, self.path, self.headers, raw)
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = raw
            with api._lock:
                api.requests.append(Request(self.command, self.path.split("?")[0],
                                            self.headers.get("Content-Type", ""), body, code))
            data = json.dumps(payload).encode()
            try:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in extra.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
                pass  # the client gave up (its timeout): nothing to answer

        do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _serve

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def _make_tls(folder: Path) -> Path:
    """A CA and a server certificate for 127.0.0.1, like a cluster's API server has."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    folder.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fake-kubernetes-ca")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    (folder / "server.key").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    (folder / "server.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    ca_file = folder / "ca.crt"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    return ca_file
