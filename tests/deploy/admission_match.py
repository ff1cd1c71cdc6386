"""Which webhooks of a MutatingWebhookConfiguration the API server calls for a pod being created.

The chart's tests ask this of the rendered configuration instead of reading its fields one by one,
because what decides whether a pod reaches the webhook is the combination: kube-apiserver
(k8s.io/apiserver, admission/plugin/webhook) calls a webhook when its ``rules`` match the request,
its ``namespaceSelector`` the namespace's labels (which always include
``kubernetes.io/metadata.name``), its ``objectSelector`` the object's labels (an absent selector is
``{}``, which matches everything), and then every one of its ``matchConditions`` evaluates to true.
Every condition is evaluated, then (as the API server's matcher does) one that is false skips the
webhook even where another errored; only when none is false and one errored does the webhook's
``failurePolicy`` decide (Fail refuses the pod), so :func:`webhooks_called` raises
:class:`ConditionError` then rather than guess.

The CEL expressions run on cel-python (``celpy``), a real CEL implementation, with the variables
the API server gives matchConditions (``object``, ``oldObject``, ``request``); ``authorizer`` is
not provided, so a condition that uses it fails here instead of passing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import celpy

JSON = dict[str, Any]
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
"""The label the API server keeps on every namespace, set to its name."""


class ConditionError(Exception):
    """A matchCondition neither true nor false (a CEL error): failurePolicy decides the request."""


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector against labels; None and {} match everything (the API server
    defaults a webhook's absent selectors to {})."""
    if not selector:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise ValueError(f"unknown selector operator {op!r}")
    return True


def _matches(patterns: Sequence[str], value: str) -> bool:
    return "*" in patterns or value in patterns


def rule_matches(rule: Mapping[str, Any], operation: str, group: str, version: str, resource: str) -> bool:
    """One RuleWithOperations against a namespaced request (no subresource)."""
    return (
        _matches(rule.get("operations", []), operation)
        and _matches(rule.get("apiGroups", []), group)
        and _matches(rule.get("apiVersions", []), version)
        and _matches(rule.get("resources", []), resource)
        and rule.get("scope", "*") in ("*", "Namespaced")
    )


def pod_create_request(pod: JSON, namespace: str) -> JSON:
    """The AdmissionRequest of a pod's creation, as matchConditions see it in ``request``."""
    return {
        "uid": "00000000-0000-0000-0000-000000000000",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
        "requestResource": {"group": "", "version": "v1", "resource": "pods"},
        "name": pod.get("metadata", {}).get("name", ""),
        "namespace": namespace,
        "operation": "CREATE",
        "userInfo": {"username": "system:serviceaccount:kube-system:job-controller",
                     "groups": ["system:serviceaccounts", "system:authenticated"]},
        "dryRun": False,
    }


def conditions_hold(conditions: Sequence[Mapping[str, Any]], pod: JSON, namespace: str) -> bool:
    """Whether every matchCondition is true for the pod's creation, in kube-apiserver's order of
    rules (k8s.io/apiserver's matchconditions.Matcher): all are evaluated; any false one gives
    False (the webhook is skipped) even where another errored, so the answer does not depend on
    the conditions' order; when none is false and some errored, :class:`ConditionError` naming
    them (failurePolicy decides)."""
    env = celpy.Environment()
    activation = {
        "object": celpy.json_to_cel(pod),
        "oldObject": celpy.json_to_cel(None),
        "request": celpy.json_to_cel(pod_create_request(pod, namespace)),
    }
    errors: list[str] = []
    for condition in conditions:
        try:
            result = env.program(env.compile(condition["expression"])).evaluate(activation)
        except celpy.CELEvalError as e:
            errors.append(f"{condition['name']}: {e}")
            continue
        if not isinstance(result, celpy.celtypes.BoolType):
            errors.append(f"{condition['name']}: {result!r} is not a bool")
        elif not result:
            return False  # false wins over any error, before or after it
    if errors:
        raise ConditionError("; ".join(errors))
    return True


def webhooks_called(
    configuration: Mapping[str, Any],
    pod: JSON,
    namespace: str,
    namespace_labels: Mapping[str, str] | None = None,
) -> list[JSON]:
    """The webhooks of ``configuration`` the API server calls, in order, when ``pod`` is created in
    ``namespace`` (whose labels are ``namespace_labels`` plus the name label)."""
    ns_labels = {**(namespace_labels or {}), NAMESPACE_NAME_LABEL: namespace}
    pod_labels = pod.get("metadata", {}).get("labels") or {}
    called = []
    for hook in configuration["webhooks"]:
        if not any(rule_matches(r, "CREATE", "", "v1", "pods") for r in hook.get("rules", [])):
            continue
        if not selector_matches(hook.get("namespaceSelector"), ns_labels):
            continue
        if not selector_matches(hook.get("objectSelector"), pod_labels):
            continue
        if not conditions_hold(hook.get("matchConditions", []), pod, namespace):
            continue
        called.append(dict(hook))
    return called
