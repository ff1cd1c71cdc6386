"""The node cache: objects on the node volume plus a SQLite index of samples and epochs.

This package is the one contract between the sampler (which writes) and the FUSE view (which reads
and asks for cuts). It knows nothing of remotes, FUSE or Kubernetes. Layout of a cache folder::

    index.sqlite          samples, epochs, catalog, counters (WAL mode)
    objects/ab/<sid>      one file per sample, named from its sample id, never from its key
    tmp/<random>.part     in-flight downloads; never listed, removed at start-up
    epochs.hwm            high-water mark of epoch numbers, kept outside the index
    epochs/epoch-N.members  the members of each live epoch, what a damaged index is rebuilt from
    quarantine/<sid>      copies of damaged objects ``epochfs verify`` found (quarantine.log: why)

Rules kept here (see DESIGN.md): an object is visible only after temp -> fsync -> rename -> dir
fsync -> index commit; eviction removes the samples admitted first that no live epoch holds; an
epoch, once cut, never changes while it is visible. The byte budget of downloads in flight is the
sampler's (:mod:`epochfs.sidecar.reservations`).

Modules, one concern each: :mod:`.records` (the values that cross the boundary), :mod:`.index`
(SQLite, transactions, meta keys, counters), :mod:`.handle` (following the index when its files
change), :mod:`.reset` (replacing a damaged index), :mod:`.memberfiles` (each live epoch's members,
kept outside the index), :mod:`.memberrestore` (rebuilding a lost index from them), :mod:`.hwm` (the
epoch high-water mark), :mod:`.objects` (object and temp files), :mod:`.recovery` (with
:mod:`.journal`, the names a crash can leave out of step, and :mod:`.objectscan`, the background
scan), :mod:`.integrity` (objects against their md5, quarantine), :mod:`.catalog` (catalog queries),
:mod:`.eviction`, :mod:`.epochs` (cuts, the cut condition, windows, requests) with
:mod:`.epochnumbers` (the numbers a cut may take), :mod:`.epochfiles` (an epoch's files) and
:mod:`.epochpins` (reads that pin epochs, retirement),
:mod:`.stats`, :mod:`.cutwait` (the help and buckets of the cut wait histogram, which the sampler,
the FUSE server and the supervisor share), :mod:`.admitted` (the admission order as the folder
view's tree built ahead follows it), :mod:`.reader` (what the FUSE view may ask) and :mod:`.cache`
(the :class:`Store` facade) with :mod:`.admit` (admitting verified downloads, its longest rule).
"""

from epochfs.sidecar.store.admitted import AdmittedSample, EpochExtent
from epochfs.sidecar.store.cache import Store
from epochfs.sidecar.store.epochnumbers import MAX_JUMP
from epochfs.sidecar.store.hwm import HWM_NAME, MAX_EPOCH
from epochfs.sidecar.store.index import INDEX_NAME, Meta
from epochfs.sidecar.store.integrity import QUARANTINE_DIR
from epochfs.sidecar.store.objects import OBJECTS_DIR, TMP_DIR, object_name
from epochfs.sidecar.store.reader import EpochReader
from epochfs.sidecar.store.records import (
    SIZE_ONLY,
    Admission,
    Candidate,
    CatalogRow,
    EpochInfo,
    FileEntry,
    NoRoom,
    Policy,
    RecoveryReport,
    Schedule,
    Stats,
    StoredObject,
    StoreError,
    TakenOut,
)

__all__ = [
    "HWM_NAME",
    "INDEX_NAME",
    "MAX_EPOCH",
    "MAX_JUMP",
    "OBJECTS_DIR",
    "QUARANTINE_DIR",
    "SIZE_ONLY",
    "TMP_DIR",
    "Admission",
    "AdmittedSample",
    "Candidate",
    "CatalogRow",
    "EpochExtent",
    "EpochInfo",
    "EpochReader",
    "FileEntry",
    "Meta",
    "NoRoom",
    "Policy",
    "RecoveryReport",
    "Schedule",
    "Stats",
    "Store",
    "StoreError",
    "StoredObject",
    "TakenOut",
    "object_name",
]
