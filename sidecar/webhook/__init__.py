"""The admission webhook: epochfs attached to a pod with one label or annotation (``epochfs webhook``).

A mutating admission webhook gets every new pod the chart's MutatingWebhookConfiguration selects
(by default, through a matchCondition, the pods whose annotation or label ``epochfs.io/inject``
asks for epochfs, read as :mod:`.mutate` reads it) and answers with an RFC 6902 JSONPatch
that adds what the chart's attach templates give a pod: the sidecar (a native sidecar init
container), the volumes, the trainer's mounts and environment. It does not know what to add by
itself: the chart renders, from the same named templates (``helm/epochfs/templates/_webhook.tpl``),
one *injection document* per profile into a ConfigMap, and the server reads those documents. So
what is injected cannot drift from the templates.

Modules:

* :mod:`.profiles`: the injection documents (loading and checking them).
* :mod:`.mutate`: the decision for one pod (mutated, skipped, refused) and its patch; pure.
* :mod:`.podchecks`: the refusals, each with its reason and way out.
* :mod:`.overrides`: the annotations' remote, capacity and shard in the sidecar's environment;
  no API token where the pod refuses one.
* :mod:`.qos`: the warning for a Guaranteed pod that the sidecar would make Burstable.
* :mod:`.fields`: the annotation and environment names the three above share.
* :mod:`.review`: AdmissionReview v1 requests and responses.
* :mod:`.server`: the HTTPS server of the reviews on ``aiohttp.web``, ``run_webhook``;
* :mod:`.serving`: how both servers listen, serve and stop, and the metrics server;
* :mod:`.slots`: the reviews decided at once, and the brief queue for the next ones;
* :mod:`.tls`: the certificate pair, taken again for new connections when it is renewed.

docs/kubernetes.md ("Attach with one annotation") is the user's side.
"""

from __future__ import annotations

from epochfs.sidecar.webhook.fields import (
    ANNOTATIONS,
    CAPACITY,
    CONTAINERS,
    INJECT,
    INJECTED,
    PROFILE,
    REMOTE,
    SHARD_INDEX,
)
from epochfs.sidecar.webhook.mutate import Decision, decide
from epochfs.sidecar.webhook.profiles import Profile, ProfileError, load_profiles

__all__ = [
    "ANNOTATIONS",
    "CAPACITY",
    "CONTAINERS",
    "INJECT",
    "INJECTED",
    "PROFILE",
    "REMOTE",
    "SHARD_INDEX",
    "Decision",
    "Profile",
    "ProfileError",
    "decide",
    "load_profiles",
]
