"""The chart's admission webhook (webhook.enabled, issue 23), rendered by the real helm.

Its objects validate strictly (kubernetes-validate, 1.29 and the newest); the server runs as two
restricted replicas with a PodDisruptionBudget and no API token; the MutatingWebhookConfiguration
routes namespaces that enforce Pod Security baseline/restricted to their own path; TLS comes from
cert-manager or from the CA the chart makes (the caBundle verifies the serving certificate for the
Service's name); the injection documents are the attach templates' output, field for field (the
one-source property); the schema and the templates refuse what cannot work.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from helm_helpers import (
    CHART,
    NAMESPACE,
    RELEASE,
    container,
    helm,
    pod_spec,
    render,
    with_remote,
)
from pss import violations

K8S_VERSIONS = ("1.29.0", kubernetes_validate.latest_version())
NAME = f"{RELEASE}-epochfs-webhook"
SERVICE_DNS = f"{NAME}.{NAMESPACE}.svc"
WEBHOOK_KINDS = {
    "ConfigMap",
    "Deployment",
    "PodDisruptionBudget",
    "Service",
    "Secret",
    "MutatingWebhookConfiguration",
    "NetworkPolicy",
}
PROFILES: dict[str, dict[str, Any]] = {
    "folder": {"sidecar": {"view": "folder"}},
    "quiet": {"kubeReporting": {"enabled": False}, "metrics": {"enabled": False}},
    "multi": {"nodes": 3, "cache": {"volume": {"type": "ephemeral", "size": "100Gi"}}},
}


def webhook_values(webhook: dict[str, Any] | None = None, **values: Any) -> dict[str, Any]:
    return with_remote({**values, "webhook": {"enabled": True, "profiles": PROFILES, **(webhook or {})}})


def webhook_objects(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        o for o in objs if o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "webhook"
    ]


def of_kind(objs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, (kind, name, [o["metadata"]["name"] for o in found])
    return found[0]


@pytest.fixture(scope="module")
def rendered(helm_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return render(helm_bin, webhook_values(), tmp_path_factory.mktemp("webhook"))


def test_lint_strict_with_the_webhook(helm_bin: Path, tmp_path: Path) -> None:
    for values in (
        webhook_values(),
        webhook_values({"certManager": {"enabled": True}}),
        webhook_values(
            {
                "certManager": {
                    "enabled": True,
                    "issuerRef": {"kind": "ClusterIssuer", "name": "internal-ca"},
                },
                "failurePolicy": "Ignore",
            }
        ),
        {**webhook_values(), "job": {"enabled": False}},
    ):
        proc = helm(helm_bin, "lint", "--strict", str(CHART), values=values, tmp=tmp_path)
        assert "0 chart(s) failed" in proc.stdout, proc.stdout + proc.stderr


def test_off_by_default(helm_bin: Path, tmp_path: Path) -> None:
    assert webhook_objects(render(helm_bin, with_remote({}), tmp_path)) == []


def test_every_object_validates_strictly(rendered: list[dict[str, Any]]) -> None:
    objs = webhook_objects(rendered)
    assert {o["kind"] for o in objs} == WEBHOOK_KINDS
    for obj in objs:
        for version in K8S_VERSIONS:
            kubernetes_validate.validate(obj, version, strict=True)


def test_the_server_runs_restricted_in_two_replicas_with_a_budget(rendered: list[dict[str, Any]]) -> None:
    deploy = of_kind(rendered, "Deployment", NAME)
    assert deploy["spec"]["replicas"] == 2
    template = deploy["spec"]["template"]
    spec = template["spec"]
    assert violations(spec, template["metadata"]) == []  # the Restricted Pod Security Standard
    assert spec["automountServiceAccountToken"] is False  # it calls no API
    [c] = spec["containers"]
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["privileged"] is False
    assert sc["runAsNonRoot"] is True and sc["allowPrivilegeEscalation"] is False
    assert c["command"] == ["epochfs", "webhook"]
    args = dict(a.removeprefix("--").split("=", 1) for a in c["args"])
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert args["profiles"] == mounts["profiles"]
    assert args["tls-cert"] == mounts["tls"] + "/tls.crt" and args["tls-key"] == mounts["tls"] + "/tls.key"
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["profiles"]["configMap"]["name"] == f"{NAME}-profiles"
    assert volumes["tls"]["secret"]["secretName"] == f"{NAME}-tls"
    selector = deploy["spec"]["selector"]["matchLabels"]
    assert selector.items() <= template["metadata"]["labels"].items()
    pdb = of_kind(rendered, "PodDisruptionBudget", NAME)
    assert pdb["spec"]["minAvailable"] == 1 and pdb["spec"]["selector"]["matchLabels"] == selector
    svc = of_kind(rendered, "Service", NAME)
    assert svc["spec"]["selector"] == selector
    assert {"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"} in svc["spec"]["ports"]
    # The training pods' own selector never picks the webhook's pods.
    training = of_kind(rendered, "Service", f"{RELEASE}-epochfs")
    assert not training["spec"]["selector"].items() <= template["metadata"]["labels"].items()


def test_the_configuration_routes_pod_security_levels_to_their_path(rendered: list[dict[str, Any]]) -> None:
    mwc = of_kind(rendered, "MutatingWebhookConfiguration", f"{NAME}-{NAMESPACE}")
    paths = {}
    for hook in mwc["webhooks"]:
        assert hook["failurePolicy"] == "Fail" and hook["sideEffects"] == "None"
        assert hook["admissionReviewVersions"] == ["v1"]
        assert hook["rules"] == [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE"],
                "resources": ["pods"],
                "scope": "Namespaced",
            }
        ]
        # No object selector (it sees labels only): the condition sends the pods whose annotation
        # or label asks (test_helm_webhook_selection.py evaluates it as the API server does).
        assert "objectSelector" not in hook
        assert [c["name"] for c in hook["matchConditions"]] == ["epochfs-inject-requested"]
        service = hook["clientConfig"]["service"]
        assert (service["name"], service["namespace"], service["port"]) == (NAME, NAMESPACE, 443)
        exprs = hook["namespaceSelector"]["matchExpressions"]
        assert exprs[0] == {
            "key": "kubernetes.io/metadata.name",
            "operator": "NotIn",
            "values": ["kube-system", "kube-node-lease", NAMESPACE],
        }
        pss = exprs[1]
        assert pss["key"] == "pod-security.kubernetes.io/enforce" and pss["values"] == [
            "baseline",
            "restricted",
        ]
        paths[pss["operator"]] = service["path"]
    assert paths == {"NotIn": "/mutate", "In": "/mutate/pss-enforced"}


def test_selectors_and_failure_policy_are_configurable(helm_bin: Path, tmp_path: Path) -> None:
    # objectSelector null (Helm drops a key that way; {} is the default): no object selector, the
    # labelled namespaces' pods that ask are sent.
    objs = render(
        helm_bin,
        webhook_values(
            {
                "failurePolicy": "Ignore",
                "timeoutSeconds": 5,
                "objectSelector": None,
                "namespaceSelector": {"matchLabels": {"epochfs.io/inject": "enabled"}},
            }
        ),
        tmp_path,
    )
    for hook in of_kind(objs, "MutatingWebhookConfiguration")["webhooks"]:
        assert hook["failurePolicy"] == "Ignore" and hook["timeoutSeconds"] == 5
        assert "objectSelector" not in hook
        assert hook["namespaceSelector"]["matchLabels"] == {"epochfs.io/inject": "enabled"}
        assert [e["key"] for e in hook["namespaceSelector"]["matchExpressions"]] == [
            "kubernetes.io/metadata.name",
            "pod-security.kubernetes.io/enforce",
        ]
    objs = render(helm_bin, webhook_values({"namespaceSelector": None}), tmp_path)
    for hook in of_kind(objs, "MutatingWebhookConfiguration")["webhooks"]:
        assert [e["key"] for e in hook["namespaceSelector"]["matchExpressions"]] == [
            "kubernetes.io/metadata.name",
            "pod-security.kubernetes.io/enforce",
        ]


def test_the_charts_ca_signs_the_serving_certificate(rendered: list[dict[str, Any]]) -> None:
    secret = of_kind(rendered, "Secret", f"{NAME}-tls")
    assert secret["type"] == "kubernetes.io/tls"
    ca = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["ca.crt"]))
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    for hook in of_kind(rendered, "MutatingWebhookConfiguration")["webhooks"]:
        assert base64.b64decode(hook["clientConfig"]["caBundle"]) == base64.b64decode(
            secret["data"]["ca.crt"]
        )
    public = ca.public_key()
    assert isinstance(public, rsa.RSAPublicKey)
    assert cert.signature_hash_algorithm is not None
    public.verify(
        cert.signature, cert.tbs_certificate_bytes, padding.PKCS1v15(), cert.signature_hash_algorithm
    )
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName
    )
    assert SERVICE_DNS in names
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True


@pytest.mark.parametrize("issuer", [{}, {"kind": "ClusterIssuer", "name": "internal-ca"}])
def test_tls_from_cert_manager(helm_bin: Path, tmp_path: Path, issuer: dict[str, str]) -> None:
    objs = render(
        helm_bin,
        webhook_values(
            {"certManager": {"enabled": True, "issuerRef": issuer, "duration": "720h", "renewBefore": "240h"}}
        ),
        tmp_path,
    )
    mwc = of_kind(objs, "MutatingWebhookConfiguration")
    assert mwc["metadata"]["annotations"] == {"cert-manager.io/inject-ca-from": f"{NAMESPACE}/{NAME}"}
    for hook in mwc["webhooks"]:
        assert "caBundle" not in hook["clientConfig"]  # cert-manager's cainjector fills it
    assert not [o for o in objs if o["kind"] == "Secret" and o["metadata"]["name"] == f"{NAME}-tls"]
    cert = of_kind(objs, "Certificate", NAME)
    assert cert["apiVersion"] == "cert-manager.io/v1"
    assert cert["spec"]["secretName"] == f"{NAME}-tls"
    assert SERVICE_DNS in cert["spec"]["dnsNames"]
    assert (cert["spec"]["duration"], cert["spec"]["renewBefore"]) == ("720h", "240h")
    issuers = [o for o in objs if o["kind"] == "Issuer"]
    if issuer:
        assert cert["spec"]["issuerRef"] == {"kind": "ClusterIssuer", "name": "internal-ca"}
        assert issuers == []
    else:
        assert cert["spec"]["issuerRef"] == {"kind": "Issuer", "name": f"{NAME}-ca"}
        by_name = {o["metadata"]["name"]: o for o in issuers}
        assert by_name[f"{NAME}-selfsigned"]["spec"] == {"selfSigned": {}}
        assert by_name[f"{NAME}-ca"]["spec"] == {"ca": {"secretName": f"{NAME}-ca"}}
        ca = of_kind(objs, "Certificate", f"{NAME}-ca")
        assert ca["spec"]["isCA"] is True and ca["spec"]["secretName"] == f"{NAME}-ca"
        assert ca["spec"]["issuerRef"] == {"kind": "Issuer", "name": f"{NAME}-selfsigned"}
    for obj in objs:
        if obj["apiVersion"].startswith("cert-manager.io/"):
            assert obj["metadata"]["namespace"] == NAMESPACE


CERT_MANAGER_API = ("--api-versions", "cert-manager.io/v1")


def uses_cert_manager(objs: list[dict[str, Any]]) -> bool:
    """The webhook's TLS: cert-manager's (a Certificate, the CA injected) or the chart's own (the
    Secret and the caBundle), never a mix of the two."""
    mwc = of_kind(objs, "MutatingWebhookConfiguration")
    injected = "cert-manager.io/inject-ca-from" in mwc["metadata"].get("annotations", {})
    certificate = any(o["kind"] == "Certificate" and o["metadata"]["name"] == NAME for o in objs)
    secret = any(o["kind"] == "Secret" and o["metadata"]["name"] == f"{NAME}-tls" for o in objs)
    bundles = {"caBundle" in hook["clientConfig"] for hook in mwc["webhooks"]}
    assert injected == certificate == (not secret) and bundles == {not certificate}, (injected, certificate,
                                                                                      secret, bundles)
    return certificate


@pytest.mark.parametrize(
    ("api_versions", "cert_manager", "expected"),
    [
        ((), {}, False),  # the default (false): the chart's own CA
        (CERT_MANAGER_API, {}, False),  # ... even where cert-manager is served (an upgrade keeps it)
        ((), {"enabled": None}, False),  # null: detect; no cert-manager.io/v1 in the cluster
        (CERT_MANAGER_API, {"enabled": None}, True),  # ... and with it: detected
        (CERT_MANAGER_API, {"enabled": False}, False),  # an explicit false wins over detection
        ((), {"enabled": True}, True),  # an explicit true needs no detection (CRDs installed later)
        (CERT_MANAGER_API, {"enabled": True}, True),
    ],
)
def test_cert_manager_is_detected_unless_chosen(helm_bin: Path, tmp_path: Path, api_versions: tuple[str, ...],
                                                cert_manager: dict[str, Any], expected: bool) -> None:
    """webhook.certManager.enabled null takes cert-manager where the cluster serves
    cert-manager.io/v1 (helm's capabilities: --api-versions for helm template), the chart's own CA
    elsewhere; true or false choose either way; false, the default, keeps a running webhook on the
    chart's CA through an upgrade."""
    values = webhook_values({"certManager": cert_manager})
    proc = helm(helm_bin, "template", RELEASE, str(CHART), "--namespace", NAMESPACE, *api_versions,
                values=values, tmp=tmp_path)
    objs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    assert uses_cert_manager(objs) is expected
    if expected:
        assert of_kind(objs, "Issuer", f"{NAME}-selfsigned")["apiVersion"] == "cert-manager.io/v1"


def test_the_default_is_the_charts_own_ca(helm_bin: Path, tmp_path: Path) -> None:
    chart_values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert chart_values["webhook"]["certManager"]["enabled"] is False
    proc = helm(helm_bin, "lint", "--strict", str(CHART), values=webhook_values(), tmp=tmp_path)
    assert "0 chart(s) failed" in proc.stdout, proc.stdout + proc.stderr


# --------------------------------------------------------------------------- one source


def documents(objs: list[dict[str, Any]]) -> dict[str, Any]:
    cm = of_kind(objs, "ConfigMap", f"{NAME}-profiles")
    assert set(cm["data"]) == {f"{p}.json" for p in ("default", *PROFILES)}
    return {k.removesuffix(".json"): json.loads(v) for k, v in cm["data"].items()}


@pytest.mark.parametrize("profile", ["default", *PROFILES])
def test_each_profile_is_what_the_attach_templates_render(
    rendered: list[dict[str, Any]], helm_bin: Path, tmp_path: Path, profile: str
) -> None:
    """The injection document of a profile is, part for part, the chart's own Job rendered with the
    chart's values and the profile's merged over them."""
    doc = documents(rendered)[profile]
    job = pod_spec(render(helm_bin, with_remote(PROFILES.get(profile, {})), tmp_path))
    assert doc["profile"] == profile and doc["apiVersion"] == "epochfs.io/injection-v1"
    assert doc["sidecarContainers"] == [container(job, "epochfs")]
    assert doc["sidecarContainers"][0]["restartPolicy"] == "Always"
    assert doc["volumes"] == [v for v in job["volumes"] if v["name"] != "dshm"]
    trainer = container(job, "trainer")
    assert doc["trainerVolumeMounts"] == trainer["volumeMounts"][: len(doc["trainerVolumeMounts"])]
    assert [m["name"] for m in doc["trainerVolumeMounts"]] == ["epochfs-mount", "epochfs-cache"]
    assert doc["trainerEnv"] == trainer["env"][:4]
    assert doc["podSecurityContext"] == job["securityContext"]
    assert doc["view"] == ("folder" if profile == "folder" else "fuse")
    assert doc["privileged"] is (profile != "folder")
    assert doc["nodes"] == PROFILES.get(profile, {}).get("nodes", 1)
    size = {"multi": 100 * 1024**3}.get(profile, 20 * 1024**3)
    assert doc["cacheVolumeBytes"] == str(size)


def test_the_job_is_unchanged_by_the_webhook(helm_bin: Path, tmp_path: Path) -> None:
    """Enabling the webhook adds objects and changes none of the chart's others."""
    plain = render(helm_bin, with_remote({}), tmp_path)
    with_webhook = [o for o in render(helm_bin, webhook_values(), tmp_path) if o not in webhook_objects([o])]
    assert with_webhook == plain


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("webhook", "message"),
    [
        ({"failurePolicy": "Sometimes"}, "failurePolicy"),
        ({"profiles": {"default": {"nodes": 2}}}, "invalid propertyName 'default'"),
        ({"profiles": {"Big": {"nodes": 2}}}, "invalid propertyName 'Big'"),
        ({"profiles": {"big": {"trainer": {"command": ["x"]}}}}, "trainer"),
        ({"profiles": {"big": {"cache": {"volume": {"type": "nfs"}}}}}, "type"),
        ({"timeoutSeconds": 31}, "timeoutSeconds"),
        ({"injectCondition": "yes"}, "injectCondition"),
        ({"certManager": {"issuerRef": {"kind": 3}}}, "kind"),
        ({"certManager": {"enabled": "auto"}}, "enabled"),
        ({"podDisruptionBudget": {"minAvailable": "half"}}, "minAvailable"),
        ({"podDisruptionBudget": {"minAvailable": -1}}, "minAvailable"),
    ],
)
def test_the_schema_refuses_what_cannot_work(
    helm_bin: Path, tmp_path: Path, webhook: dict[str, Any], message: str
) -> None:
    values = with_remote({"webhook": {"enabled": True, **webhook}})
    proc = helm(helm_bin, "template", RELEASE, str(CHART), values=values, tmp=tmp_path, check=False)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr


def test_a_profile_without_a_native_sidecar_is_refused(helm_bin: Path, tmp_path: Path) -> None:
    values = webhook_values({"profiles": {"old": {"sidecar": {"native": False}}}})
    proc = helm(helm_bin, "template", RELEASE, str(CHART), values=values, tmp=tmp_path, check=False)
    assert proc.returncode != 0 and "webhook profile old: the webhook injects a native sidecar" in proc.stderr
    values = webhook_values(
        {
            "profiles": {
                "folder-on-host": {"sidecar": {"view": "folder"}, "cache": {"volume": {"type": "hostPath"}}}
            }
        }
    )
    proc = helm(helm_bin, "template", RELEASE, str(CHART), values=values, tmp=tmp_path, check=False)
    assert proc.returncode != 0 and "forbid hostPath volumes" in proc.stderr


# --------------------------------------------------------------------------- review fixes


def test_the_tls_key_is_readable_by_the_servers_user(rendered: list[dict[str, Any]]) -> None:
    """The Secret's files are root's: uid/gid 10001 reads them through the group (fsGroup) or
    through a world-readable mode, never with 0440 and no fsGroup (PermissionError at start)."""
    spec = of_kind(rendered, "Deployment", NAME)["spec"]["template"]["spec"]
    mode = {v["name"]: v for v in spec["volumes"]}["tls"]["secret"]["defaultMode"]
    gid = spec["securityContext"]["runAsGroup"]
    fs_group = spec["securityContext"].get("fsGroup")
    assert mode & 0o004 or (fs_group == gid and mode & 0o040), (oct(mode), fs_group)


def _namespace_excluded(hook: dict[str, Any], namespace: str) -> bool:
    for e in hook["namespaceSelector"].get("matchExpressions", []):
        if (
            e["key"] == "kubernetes.io/metadata.name"
            and e["operator"] == "NotIn"
            and namespace in e["values"]
        ):
            return True
    return False


@pytest.mark.parametrize(
    "webhook",
    [
        {},
        {"objectSelector": None, "namespaceSelector": {"matchLabels": {"epochfs.io/inject": "enabled"}}},
        {"objectSelector": None, "namespaceSelector": None},
        {
            "objectSelector": None,
            "namespaceSelector": {
                "matchExpressions": [
                    {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]},
                    {"key": "team", "operator": "Exists"},
                ]
            },
        },
    ],
)
def test_the_webhooks_own_namespace_is_never_sent(
    helm_bin: Path, tmp_path: Path, webhook: dict[str, Any]
) -> None:
    objs = render(helm_bin, webhook_values(webhook), tmp_path)
    for hook in of_kind(objs, "MutatingWebhookConfiguration")["webhooks"]:
        assert _namespace_excluded(hook, NAMESPACE), hook["namespaceSelector"]
        names = [
            e
            for e in hook["namespaceSelector"]["matchExpressions"]
            if e["key"] == "kubernetes.io/metadata.name"
        ]
        assert len(names) == 1  # merged into the user's NotIn, not a second condition
        if webhook.get("namespaceSelector", {}) and "matchExpressions" in webhook["namespaceSelector"]:
            assert names[0]["values"] == ["kube-system", NAMESPACE]
            assert {"key": "team", "operator": "Exists"} in hook["namespaceSelector"]["matchExpressions"]


@pytest.mark.parametrize("min_available", [1, "50%"])
def test_the_budget_accepts_a_number_or_a_percentage(
    helm_bin: Path, tmp_path: Path, min_available: int | str
) -> None:
    objs = render(
        helm_bin, webhook_values({"podDisruptionBudget": {"minAvailable": min_available}}), tmp_path
    )
    pdb = of_kind(objs, "PodDisruptionBudget", NAME)
    assert pdb["spec"]["minAvailable"] == min_available
    kubernetes_validate.validate(pdb, K8S_VERSIONS[-1], strict=True)


@pytest.mark.parametrize(
    ("webhook", "message"),
    [
        (
            {"replicas": 1},
            "webhook.replicas (1) must be more than webhook.podDisruptionBudget.minAvailable (1)",
        ),
        ({"replicas": 2, "podDisruptionBudget": {"minAvailable": 2}}, "blocks every node drain"),
        ({"podDisruptionBudget": {"minAvailable": "100%"}}, "blocks every node drain"),
    ],
)
def test_a_budget_that_blocks_drains_is_refused(
    helm_bin: Path, tmp_path: Path, webhook: dict[str, Any], message: str
) -> None:
    proc = helm(
        helm_bin, "template", RELEASE, str(CHART), values=webhook_values(webhook), tmp=tmp_path, check=False
    )
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr


def test_an_external_issuer_kind_is_accepted(helm_bin: Path, tmp_path: Path) -> None:
    issuer = {"kind": "AWSPCAClusterIssuer", "name": "pca", "group": "awspca.cert-manager.io"}
    objs = render(helm_bin, webhook_values({"certManager": {"enabled": True, "issuerRef": issuer}}), tmp_path)
    assert of_kind(objs, "Certificate", NAME)["spec"]["issuerRef"] == issuer


def test_the_network_policy_leaves_the_webhook_pods_alone(helm_bin: Path, tmp_path: Path) -> None:
    """The policy selects the training pods only: over the webhook's pods it would refuse the API
    server's calls to their https port."""
    objs = render(helm_bin, webhook_values(job={"enabled": True}), tmp_path)
    np = of_kind(objs, "NetworkPolicy", f"{RELEASE}-epochfs")
    webhook_labels = of_kind(objs, "Deployment", NAME)["spec"]["template"]["metadata"]["labels"]
    training_labels = of_kind(objs, "Job")["spec"]["template"]["metadata"]["labels"]
    selector = np["spec"]["podSelector"]["matchLabels"]
    assert not selector.items() <= webhook_labels.items()
    assert selector.items() <= training_labels.items()
    peers = np["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"]
    assert not peers.items() <= webhook_labels.items() and peers.items() <= training_labels.items()


def test_the_webhook_pods_have_a_policy_of_their_own(helm_bin: Path, tmp_path: Path) -> None:
    """Without one the server's pods took any traffic on any port (checkov CKV2_K8S_6): https is
    open to any address, since the API server calls from a control-plane address no selector
    names; /metrics only to networkPolicy.metricsFrom, as the sidecars'; nothing else."""
    prometheus = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    objs = render(helm_bin, {**webhook_values(job={"enabled": False}),
                             "networkPolicy": {"metricsFrom": prometheus}}, tmp_path)
    np = of_kind(objs, "NetworkPolicy", NAME)
    pod = of_kind(objs, "Deployment", NAME)["spec"]["template"]
    assert np["spec"]["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert np["spec"]["policyTypes"] == ["Ingress"]
    by_port = {rule["ports"][0]["port"]: rule.get("from") for rule in np["spec"]["ingress"]}
    assert by_port == {"https": None, "metrics": prometheus}
    declared = {p["name"] for p in container(pod["spec"], "webhook")["ports"]}
    assert set(by_port) == declared  # every port the server listens on, by the name it declares
    off = render(helm_bin, {**webhook_values(job={"enabled": False}), "networkPolicy": {"enabled": False}},
                 tmp_path)
    assert [o for o in off if o["kind"] == "NetworkPolicy"] == []
