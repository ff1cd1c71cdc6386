"""Listing the remote into the catalog: in parallel spans, page by page, resumable, beside the
sampler (:mod:`.sources` where keys come from, :mod:`.filter` what of them is cataloged,
:mod:`.lister` the parallel listers, :mod:`.background` the listing thread and its relists,
:mod:`.indexfile` and :mod:`.inventory` listing from an index file instead of the remote)."""

from epochfs.sidecar.listing.background import ListingThread
from epochfs.sidecar.listing.filter import CatalogReport
from epochfs.sidecar.listing.lister import Lister
from epochfs.sidecar.listing.paged import PagedSource
from epochfs.sidecar.listing.sources import SerialSource, Source, source_for
from epochfs.sidecar.listing.span import Span

__all__ = ["CatalogReport", "Lister", "ListingThread", "PagedSource", "SerialSource", "Source", "Span",
           "source_for"]
