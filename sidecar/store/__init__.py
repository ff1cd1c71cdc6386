"""The node cache: objects on the node volume plus a SQLite index of samples and epochs.

This package is the one contract between the sampler (which writes) and the FUSE view (which reads
and asks for cuts). It knows nothing of remotes, FUSE or Kubernetes. Layout of a cache folder::

    index.sqlite          samples, epochs, catalog, counters (WAL mode)
    objects/ab/<sid>      one file per sample, named from its sample id, never from its key
    tmp/<random>.part     in-flight downloads; never listed, removed at start-up

Rules kept here (see DESIGN.md): an object is visible only after temp -> fsync -> rename -> dir
fsync -> index commit; eviction removes the samples admitted first that no live epoch holds; an
epoch, once cut, never changes while it is visible. The byte budget of downloads in flight is the
sampler's (:mod:`epochfs.sidecar.reservations`).

Modules, one concern each: :mod:`.records` (the values that cross the boundary), :mod:`.index`
(SQLite, transactions, meta keys, counters), :mod:`.objects` (object and temp files),
:mod:`.recovery`, :mod:`.catalog` (catalog queries), :mod:`.eviction`, :mod:`.epochs` (cuts, the cut
condition, windows, requests, retirement), :mod:`.stats`, :mod:`.reader` (what the FUSE view may
ask) and :mod:`.cache` (the :class:`Store` facade).
"""

from epochfs.sidecar.store.cache import Store
from epochfs.sidecar.store.index import INDEX_NAME, Meta
from epochfs.sidecar.store.objects import OBJECTS_DIR, TMP_DIR, object_name
from epochfs.sidecar.store.reader import EpochReader
from epochfs.sidecar.store.records import (
    Admission,
    Candidate,
    CatalogRow,
    EpochInfo,
    FileEntry,
    Policy,
    RecoveryReport,
    Schedule,
    Stats,
    StoreError,
)

__all__ = [
    "INDEX_NAME",
    "OBJECTS_DIR",
    "TMP_DIR",
    "Admission",
    "Candidate",
    "CatalogRow",
    "EpochInfo",
    "EpochReader",
    "FileEntry",
    "Meta",
    "Policy",
    "RecoveryReport",
    "Schedule",
    "Stats",
    "Store",
    "StoreError",
    "object_name",
]
