"""What an empty listing asks the user to do about ``--remote``.

The sampler's warning, ``status.json``, ``/readyz`` and the trainer's waiting line all quote it
(:mod:`.stats` writes it; the listing's own check, ``sidecar/listing/capacity.py``, logs it;
``epochfs index`` warns with it).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

GLOB = "*?["
"""A glob's characters: what gsutil and fsspec patterns, written as the dataset's URL, hold."""
BRACES = re.compile(r"\{[^{}]*\}")
"""webdataset's brace sets (``shard-{000..099}.tar``): ``--include`` takes globs, which have none."""


def prefix_fix(remote: str, *, index: bool = False) -> str:
    """The fix an empty listing of ``remote`` names: a last part that is a pattern (a glob, or
    braces) written where the dataset's prefix goes gets the prefix and the ``--include`` glob
    that keeps those keys (``x[0-9]/``, a folder pattern: ``'x[0-9]/**'``; braces become ``*``);
    else check the prefix. ``index``: the words for ``epochfs index``, whose remote is its
    argument and which has no ``--include`` (the sidecars take it). A URL with a query or a
    fragment (an HTTP index's) is a prefix as written: its ``?`` is no pattern."""
    parts = urlsplit(remote)
    head, _, last = remote.rstrip("/").rpartition("/")
    if parts.query or parts.fragment or "://" not in head or not last:
        return _check(index)
    braces = BRACES.search(last) is not None
    if not braces and not any(c in last for c in GLOB):
        return _check(index)
    glob = BRACES.sub("*", last) + ("/**" if remote.endswith("/") else "")
    note = " (--include takes globs; braces are not expanded)" if braces else ""
    if index:
        return (f"the remote is a prefix, not a pattern: epochfs index {head}, and give the "
                f"sidecars --include '{glob}'{note}")
    return f"--remote is a prefix, not a pattern: --remote {head} --include '{glob}'{note}"


def _check(index: bool) -> str:
    return "check the remote's prefix" if index else "check --remote's prefix"
