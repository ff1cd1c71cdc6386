"""A span of the key space and a page of one: what every source hands the listers.

A source (:mod:`.sources`) says how to split the key space into spans and yields one span's pages
from a resume point; each page carries the resume point after it, which the lister commits with
the page's rows, so a restart resumes where the last committed page ended. Apart from the sources
so that each source (:mod:`.paged`, :mod:`.sources`, :mod:`.indexfile`, :mod:`.inventory`) and the
listers import these two values without importing one another.
"""

from __future__ import annotations

from dataclasses import dataclass

from epochfs.sidecar.remote import RemoteObject


@dataclass(frozen=True)
class Span:
    """Keys under ``prefix``, after ``start`` ('' = from the beginning), before ``stop`` (None:
    to the end). Keys are relative to the remote root."""

    prefix: str
    start: str
    stop: str | None


@dataclass(frozen=True)
class Page:
    objects: list[RemoteObject]
    after: str
    """Resume point after this page (the source's own notion)."""
    done: bool
    """The span has no more pages."""
    skips: int = 0
    """Records of this page the source could not read (an index's or an inventory's; it logged
    them): counted in the catalog's skips with the page, as the filter's are."""


__all__ = ["Page", "Span"]
