"""Which pods reach the chart's admission webhook, decided as the API server decides it.

Issue 23 asks that a pod *annotated* ``epochfs.io/inject: "true"`` gets epochfs. An object selector
sees labels only, so the chart's MutatingWebhookConfiguration must send such a pod some other way
without sending every other pod (each would wait on the webhook, and with failurePolicy Fail be
refused while it is down). The chart has no object selector by default and a matchCondition (CEL
on the pod's metadata) instead. These tests render the chart with the real helm and evaluate its
rules, selectors and conditions as kube-apiserver does (admission_match.py, CEL on cel-python),
then hand the pods that are sent to the server's own decision (epochfs.sidecar.webhook.mutate)
with the profiles the chart rendered: the condition must pass exactly the pods the server does
not skip.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from admission_match import ConditionError, conditions_hold, webhooks_called
from helm_helpers import CHART, NAMESPACE, RELEASE, helm, render, with_remote

from epochfs.sidecar.webhook.mutate import decide
from epochfs.sidecar.webhook.profiles import Profile, profiles_from_documents
from epochfs.sidecar.webhook.server import PATHS

INJECT = "epochfs.io/inject"
Namespace = tuple[str, dict[str, str]]
"""A namespace's name and labels."""
TEAM: Namespace = ("team-a", {})  # a namespace without labels of its own
RESTRICTED: Namespace = ("secure", {"pod-security.kubernetes.io/enforce": "restricted"})
ABSENT = None


def values(**webhook: Any) -> dict[str, Any]:
    return with_remote({"webhook": {"enabled": True, "profiles": {"folder": {"sidecar": {"view": "folder"}}},
                                    **webhook}})


def configuration(objs: list[dict[str, Any]]) -> dict[str, Any]:
    [mwc] = [o for o in objs if o["kind"] == "MutatingWebhookConfiguration"]
    return mwc


def profiles(objs: list[dict[str, Any]]) -> dict[str, Profile]:
    """The injection documents of the profiles ConfigMap, loaded as the server loads them."""
    [cm] = [o for o in objs
            if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-webhook-profiles")]
    return profiles_from_documents({k.removesuffix(".json"): json.loads(v) for k, v in cm["data"].items()})


def pod(annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod as a Job controller creates it; metadata maps left out when None (not even empty)."""
    meta: dict[str, Any] = {"generateName": "train-", "namespace": TEAM[0]}
    if annotations is not None:
        meta["annotations"] = annotations
    if labels is not None:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"restartPolicy": "Never",
                     "containers": [{"name": "trainer", "image": "pytorch/pytorch:2.3.0",
                                     "command": ["python", "train.py"]}]}}


def admitted(objs: list[dict[str, Any]], p: dict[str, Any], namespace: Namespace) -> list[str]:
    """What becomes of the pod: for each webhook the API server calls, its name and the server's
    decision on the path it is sent to (empty: the pod is created untouched, never sent)."""
    called = webhooks_called(configuration(objs), p, namespace[0], namespace[1])
    loaded = profiles(objs)
    out = []
    for hook in called:
        pss_enforced = PATHS[hook["clientConfig"]["service"]["path"]]
        out.append(f"{hook['name']}: {decide(p, loaded, pss_enforced=pss_enforced).result}")
    return out


@pytest.fixture(scope="module")
def rendered(helm_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return render(helm_bin, values(), tmp_path_factory.mktemp("selection"))


def test_a_pod_with_only_the_annotation_is_sent_and_mutated(rendered: list[dict[str, Any]]) -> None:
    """The issue's one line, as an annotation, with the chart's defaults (the audit's finding: the
    default object selector wanted a label, so the annotation alone attached nothing)."""
    annotated = pod(annotations={INJECT: "true"})
    assert admitted(rendered, annotated, TEAM) == ["inject.epochfs.io: mutated"]
    # A namespace that enforces Restricted goes to the other path, where the folder profile serves.
    folder = pod(annotations={INJECT: "true", "epochfs.io/profile": "folder"})
    assert admitted(rendered, folder, RESTRICTED) == ["inject-pss-enforced.epochfs.io: mutated"]
    # and the FUSE profile there is refused with the server's message, not left without epochfs.
    assert admitted(rendered, annotated, RESTRICTED) == ["inject-pss-enforced.epochfs.io: refused"]


def test_the_default_has_no_object_selector(rendered: list[dict[str, Any]]) -> None:
    for hook in configuration(rendered)["webhooks"]:
        assert "objectSelector" not in hook
        assert [c["name"] for c in hook["matchConditions"]] == ["epochfs-inject-requested"]


@pytest.mark.parametrize("annotation", [ABSENT, "true", "false", "yes"])
@pytest.mark.parametrize("label", [ABSENT, "true", "false", "yes"])
def test_the_condition_sends_exactly_the_pods_the_server_does_not_skip(
    rendered: list[dict[str, Any]], annotation: str | None, label: str | None
) -> None:
    """The annotation when present, else the label; absent or "false" declines, another value is
    sent and refused with a message (it is a typo, not a no)."""
    p = pod(annotations={} if annotation is None else {INJECT: annotation, "team": "vision"},
            labels={"app": "resnet"} if label is None else {INJECT: label, "app": "resnet"})
    server = decide(p, profiles(rendered)).result
    sent = admitted(rendered, p, TEAM)
    if server == "skipped":
        assert sent == []
    else:
        assert sent == [f"inject.epochfs.io: {server}"]
    wanted = annotation if annotation is not None else label
    assert server == {None: "skipped", "false": "skipped", "true": "mutated"}.get(wanted, "refused")


@pytest.mark.parametrize(
    "meta",
    [
        {},
        {"annotations": {}, "labels": {}},
        {"annotations": {"epochfs.io/profile": "folder"}},  # a profile but no switch
        {"labels": {"app": "web"}, "annotations": {"kubectl.kubernetes.io/restartedAt": "now"}},
    ],
)
def test_pods_that_do_not_ask_are_never_sent(rendered: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    """Every pod created in the cluster is evaluated: the condition must be false, never an error
    (an error is failurePolicy's to decide, and Fail would refuse the pod)."""
    p = pod()
    p["metadata"].update(meta)
    for namespace in (TEAM, RESTRICTED):
        assert admitted(rendered, p, namespace) == []


@pytest.mark.parametrize("namespace", [NAMESPACE, "kube-system", "kube-node-lease"])
def test_an_annotated_pod_in_a_left_out_namespace_is_not_sent(
    rendered: list[dict[str, Any]], namespace: str
) -> None:
    assert admitted(rendered, pod(annotations={INJECT: "true"}), (namespace, {})) == []


def test_an_object_selector_still_narrows(helm_bin: Path, tmp_path: Path) -> None:
    """webhook.objectSelector stays available: with the label as selector the label asks and the
    annotation alone does not (the chart's former default)."""
    objs = render(helm_bin, values(objectSelector={"matchLabels": {INJECT: "true"}}), tmp_path)
    assert admitted(objs, pod(annotations={INJECT: "true"}), TEAM) == []
    assert admitted(objs, pod(labels={INJECT: "true"}), TEAM) == ["inject.epochfs.io: mutated"]


def test_without_the_condition_every_selected_pod_is_sent(helm_bin: Path, tmp_path: Path) -> None:
    """injectCondition=false: the selectors alone decide, so with none every pod of the selected
    namespaces is sent (and waits on the webhook); the server skips those that do not ask."""
    objs = render(helm_bin, values(injectCondition=False), tmp_path)
    for hook in configuration(objs)["webhooks"]:
        assert "matchConditions" not in hook
    assert admitted(objs, pod(labels={"app": "web"}), TEAM) == ["inject.epochfs.io: skipped"]
    assert admitted(objs, pod(annotations={INJECT: "true"}), TEAM) == ["inject.epochfs.io: mutated"]


def test_a_cluster_older_than_the_webhook_needs_is_refused(helm_bin: Path, tmp_path: Path) -> None:
    """matchConditions are on by default from 1.28 (an older API server drops the field and would
    send every pod); the webhook's native sidecars need 1.29: one message says both."""
    proc = helm(helm_bin, "template", RELEASE, str(CHART), "--kube-version", "1.28.9", values=values(),
                tmp=tmp_path, check=False)
    assert proc.returncode != 0
    assert "the webhook needs Kubernetes 1.29 or newer" in proc.stderr, proc.stderr
    assert "rendering offline (helm template, a GitOps tool), pass --kube-version" in proc.stderr, proc.stderr
    helm(helm_bin, "template", RELEASE, str(CHART), "--kube-version", "1.29.0", values=values(), tmp=tmp_path)


def test_a_false_condition_skips_the_webhook_even_where_another_errors() -> None:
    """kube-apiserver evaluates every matchCondition: one false skips the webhook whatever the
    others gave, in any order; failurePolicy decides only when none is false and one errored."""
    errs = {"name": "errs", "expression": 'object.metadata.labels["x"] == "y"'}  # no labels: an error
    false, true = {"name": "no", "expression": "false"}, {"name": "yes", "expression": "true"}
    assert not conditions_hold([errs, false], pod(), TEAM[0])
    assert not conditions_hold([false, errs], pod(), TEAM[0])
    with pytest.raises(ConditionError, match=r"^errs: "):
        conditions_hold([true, errs], pod(), TEAM[0])


def notes(helm_bin: Path, tmp_path: Path, chart_values: dict[str, Any]) -> str:
    proc = helm(helm_bin, "install", RELEASE, str(CHART), "--dry-run=client", "--namespace", NAMESPACE,
                values=chart_values, tmp=tmp_path)
    return proc.stdout.split("NOTES:", 1)[1]


def test_the_notes_say_how_a_pod_asks_and_warn_when_every_pod_is_sent(helm_bin: Path, tmp_path: Path) -> None:
    text = notes(helm_bin, tmp_path, values())
    assert 'a pod created with the annotation (or label)\nepochfs.io/inject: "true" gets epochfs' in text
    assert "WARNING" not in text and "annotation alone is not enough" not in text
    assert "annotation alone is not enough" in notes(
        helm_bin, tmp_path, values(objectSelector={"matchLabels": {INJECT: "true"}}))
    text = notes(helm_bin, tmp_path, values(injectCondition=False))
    assert "WARNING: webhook.injectCondition=false and no webhook.objectSelector: every pod" in text
    assert "while no replica answers, refused" in text
