"""A page the listers read and have not committed yet: what its group commit needs of it.

Apart from :mod:`.lister` so that the listers' module stays about the listers; the commit
(:meth:`~.lister.Lister._commit_waiting`) takes these in groups, and a clash found across
stretches as the group commits (:mod:`.clashes`) is added to the group's last page, so that it is
marked after every row of the group is written.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from epochfs.sidecar.listing.clashes import Edges
from epochfs.sidecar.listing.planner import Segment
from epochfs.sidecar.listing.sinks import ListedPage


@dataclass
class PendingPage:
    """A page read, waiting for its commit."""

    seg: Segment
    keys: list[str]
    page: ListedPage
    left_out: int
    """Of ``keys``, those the include/exclude globs leave out: the planner counts the kept ones."""
    edges: Edges = dataclasses.field(default_factory=Edges)
    """What its stretch's clash finder hands over (:mod:`.clashes`)."""

    def add_clashes(self, keys: list[str]) -> None:
        """Mark ``keys`` as clashes with this page (its rows and the earlier pages' are written first)."""
        rows = self.page.rows
        self.page = ListedPage(dataclasses.replace(rows, clashes=[*rows.clashes, *keys]), self.page.objects)


__all__ = ["PendingPage"]
