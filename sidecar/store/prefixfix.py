"""What an empty listing asks the user to do about ``--remote``.

The sampler's warning, ``status.json``, ``/readyz`` and the trainer's waiting line all quote it
(:mod:`.stats` writes it; the listing's own check, ``sidecar/listing/capacity.py``, logs it).
"""

from __future__ import annotations

GLOB = "*?[{"
"""A pattern's characters (gsutil's and fsspec's globs, webdataset's braces)."""


def prefix_fix(remote: str) -> str:
    """The fix an empty listing of ``remote`` names: a last part holding a pattern's characters
    is most often a pattern written where the dataset's prefix goes, and the prefix and
    ``--include`` say it; else check the prefix."""
    head, _, last = remote.rstrip("/").rpartition("/")
    if "://" in head and any(c in last for c in GLOB):
        return f"--remote is a prefix, not a pattern: --remote {head} --include '{last}'"
    return "check --remote's prefix"
