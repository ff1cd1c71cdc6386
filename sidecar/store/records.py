"""The values that cross the store's boundary: rules, catalog entries, admissions, epochs, stats.

Plain frozen dataclasses with no behaviour beyond parsing, so the sampler, the FUSE view and the
CLI can exchange them without knowing SQLite. A sample's key is also its path inside ``epoch-N/``
(keys are made safe before they reach the catalog: :mod:`epochfs.sidecar.keys`).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


class StoreError(Exception):
    """A cache folder that cannot be used (not a folder, corrupt index, wrong schema)."""


class NoRoom(StoreError):
    """The index could not be opened because the cache's volume is full: no damage and no bad
    setting, a wait (the commands exit ``EXIT_RETRY``; the supervisor waits for room)."""


NO_ROOM_BYTES = 1 << 20
"""Free bytes under which a failed open of the index is the volume's fullness: SQLite must create
its shared-memory file (32 KiB) and write-ahead log to open the index at all."""


MAX_WINDOW = 1 << 62
"""The most keys an epoch's window counts: more than any catalog holds, and within SQLite's
64-bit integers (the window's size is written to the index with the epoch)."""


@dataclass(frozen=True)
class Schedule:
    """Schedule mode: epoch N holds the first ``initial * growth**N`` keys of the sampling order."""

    initial: int
    growth: float

    def size(self, n: int) -> int:
        """Number of keys in epoch ``n``'s window before the capacity budget trims its front, at
        most :data:`MAX_WINDOW`: ``growth**n`` passes any catalog within a few hundred epochs
        (1.5**90 × 1,000 is past 2**63) and past float's range later."""
        try:
            keys = self.initial * (self.growth**n)
        except OverflowError:
            return MAX_WINDOW
        return MAX_WINDOW if keys >= MAX_WINDOW else round(keys)

    def __str__(self) -> str:
        return f"initial={self.initial},growth={self.growth}"

    @classmethod
    def parse(cls, text: str) -> Schedule:
        """Parse ``initial=1000,growth=1.5``; raises ValueError with the reason."""
        fields: dict[str, str] = {}
        for part in text.split(","):
            name, sep, value = part.partition("=")
            if not sep:
                raise ValueError(f"expected name=value, got {part!r}")
            if name.strip() in fields:  # the last would win without a word
                raise ValueError(f"{name.strip()} given twice")
            fields[name.strip()] = value.strip()
        unknown = set(fields) - {"initial", "growth"}
        if unknown:
            raise ValueError(f"unknown schedule field(s): {', '.join(sorted(unknown))}")
        try:
            initial = int(fields.get("initial", "1000"))
        except ValueError:
            raise ValueError(f"initial must be a whole number, got {fields['initial']!r}") from None
        try:
            growth = float(fields.get("growth", "1.5"))
        except ValueError:
            raise ValueError(f"growth must be a number, got {fields['growth']!r}") from None
        if initial < 1:
            raise ValueError("initial must be at least 1")
        if not growth >= 1.0 or growth == float("inf"):  # nan fails the first test
            raise ValueError("growth must be a number of at least 1.0")
        return cls(initial=initial, growth=growth)


@dataclass(frozen=True)
class Policy:
    """The cache rules both processes must agree on; stored in the index by the sampler."""

    capacity: int
    """Byte budget of the cache, in-flight downloads included."""
    keep_epochs: int = 2
    """The newest K epochs stay pinned (never evicted, never retired)."""
    min_samples: int = 1
    """Complete samples needed before an epoch can be cut."""
    headroom: float = 0.25
    """Share of the capacity kept out of epochs so that sampling can go on while epochs are pinned."""
    in_use_seconds: float = 600.0
    """An epoch read within this many seconds stays pinned even when it is not among the newest."""
    retire_grace: float = 5.0
    """Seconds a retired epoch's samples outlive its retirement (:data:`.epochpins.RETIRE_GRACE`)."""
    schedule: Schedule | None = None
    """Schedule mode when set; snapshot mode otherwise."""

    @property
    def epoch_budget(self) -> int:
        """Most bytes one epoch may hold, so that new samples still fit beside the pinned epochs."""
        return max(1, int(self.capacity * (1.0 - self.headroom)))


@dataclass(frozen=True)
class CatalogRow:
    """One listed remote object, with its sampling-order rank precomputed by the sampler."""

    key: str
    sid: str
    size: int
    version: str
    rank: int


@dataclass(frozen=True)
class Candidate:
    """A catalog entry chosen for download."""

    key: str
    sid: str
    size: int
    version: str


SIZE_ONLY = "size-only"
"""The checksum recorded for a sample whose body nothing could verify beyond its size (no md5
ETag, no stored checksum the remote offers): the manifest says so rather than vouch for bytes."""


@dataclass(frozen=True)
class Admission:
    """A fully written, verified temp file ready to become a sample.

    ``checksum`` is what the manifest shows: the digest (``md5:<hex>``, ``crc64nvme:<base64>``...)
    of bytes that were verified against the remote, or :data:`SIZE_ONLY`. ``digest`` is the digest
    of the bytes written, whatever verified them, naming its algorithm (:mod:`.digests`; a bare hex
    string is an md5): the scrub's reference for the local copy (empty: taken from ``checksum``).
    ``verified`` names what checked the body against the remote (``etag-md5``, ``etag-multipart``,
    ``crc32``, ``crc32c``, ``crc64nvme``, ``sha1``, ``sha256``, ``size-only``; empty when the
    caller did not say).
    """

    key: str
    sid: str
    size: int
    checksum: str
    version: str
    temp: Path
    digest: str = ""
    verified: str = ""
    inode: tuple[int, int] | None = None
    """The temp file's (device, inode) while the download's descriptor was open: the file that was
    written and hashed, the only one :meth:`.objects.ObjectFiles.install` installs (None: any
    regular file, for an admission made without a download)."""

    @property
    def local_digest(self) -> str:
        """The digest of the bytes written (an ``md5:`` ``checksum``'s hex when ``digest`` was not
        given)."""
        if self.digest:
            return self.digest
        return self.checksum[4:] if self.checksum.startswith("md5:") else ""


@dataclass(frozen=True)
class FileEntry:
    """One file of an epoch: its path inside epoch-N/, size, checksum and object file name."""

    path: str
    size: int
    checksum: str
    object_name: str


@dataclass(frozen=True)
class EpochInfo:
    """A live epoch as listed by :meth:`Store.epochs`."""

    epoch: int
    samples: int
    bytes: int
    new: int
    evicted: int
    cut_at: float
    listed: int | None = None
    """Keys of this shard the listing had seen when the epoch was cut (None: not recorded)."""
    estimated: int | None = None
    """About how many keys the remote held for this shard, as the listing estimated then."""


@dataclass(frozen=True)
class RecoveryReport:
    """What start-up recovery found and repaired."""

    temp_removed: int = 0
    repairs_marked: int = 0
    """Samples whose object file was missing or short: marked to be fetched again into their place
    (their rows and every epoch listing them stay)."""
    orphans_removed: int = 0
    integrity: str = "ok"

    def __str__(self) -> str:
        return (
            f"recovery: integrity {self.integrity}, {self.temp_removed} temp file(s) removed, "
            f"{self.repairs_marked} lost object(s) to fetch again, {self.orphans_removed} orphan "
            "object(s) removed"
        )


@dataclass(frozen=True)
class StoredObject:
    """One sample as the scrub checks it: its object file against the size and md5 recorded."""

    id: int
    sid: str
    key: str
    size: int
    digest: str
    """The digest of the bytes admitted, ``<algorithm>:<value>`` or a bare md5 hex (:mod:`.digests`);
    empty for samples of an index older than schema 2 that had none (only their size is checked)."""
    verified: str


@dataclass(frozen=True)
class TakenOut:
    """A sample the scrub found damaged and marked for a repair in place (or lost)."""

    key: str
    sid: str
    size: int
    problem: str
    moved_to: Path | None
    """Where a copy of the object file went (``<cache>/quarantine/<sid>``); None when none was
    kept (the file stays for its repair, was removed, or was already gone)."""
    refetch: Candidate | None
    """The catalog entry to fetch again (None when the catalog no longer lists the key)."""


@dataclass
class Stats:
    """Occupancy and counters, the body of ``status.json`` and ``epochfs status --json``."""

    cache_bytes: int
    """Bytes of complete samples; ``cache_bytes + inflight_bytes <= capacity_bytes`` always."""
    capacity_bytes: int
    samples: int
    inflight_bytes: int
    backpressure: bool
    """Sampling is paused: see ``backpressure_reason``."""
    catalog_objects: int
    pending_cuts: list[int]
    epochs: list[dict[str, Any]]
    fetched_total: int = 0
    fetched_bytes_total: int = 0
    evicted_total: int = 0
    evicted_bytes_total: int = 0
    skipped_total: int = 0
    """Keys that will not be fetched: downloads that kept failing, objects too large for the
    volume, keys the listing refused (hostile names, a key that is also a folder)."""
    failed_total: int = 0
    """Of those, the keys skipped because their downloads kept failing (retries spent): the remote
    errors the Kubernetes reporter warns of."""
    cuts_total: int = 0
    corrupt_objects_total: int = 0
    """Samples found damaged (wrong bytes, wrong size, missing) by a scrub and taken out."""
    repaired_total: int = 0
    """Damaged samples fetched again into their place (every epoch listing them kept them)."""
    repairing: int = 0
    """Samples waiting for their repair now (the damaged file kept until it is replaced), lost
    ones included."""
    lost: int = 0
    """Of those, the samples marked lost (the remote no longer has their bytes): their entries stay
    in every live epoch that lists them and a read of one fails (EIO) until the epoch retires."""
    latest_epoch: int | None = None
    mode: str = "snapshot"
    backpressure_reason: str | None = None
    """"cache full" (nothing evictable: live epochs pin it), "cache full: epoch N's window cannot
    fit beside the kept epochs (a-b)" (schedule mode stuck: no cut would come; raise the budget or
    cut with --force) or "disk full" (the node volume has no room, whatever the budget says); None
    while sampling goes on."""
    listing: dict[str, Any] = field(default_factory=dict)
    """How much of the dataset the listing has covered (:func:`.stats.listing_known`)."""
    first_epoch: dict[str, Any] | None = None
    """Before the first cut: what the first epoch waits for, ``{"samples": cached, "target":
    needed}`` (``--min-samples``, or the first schedule window's size), and ``"listing_round":
    true`` while it waits for the listing's first round; None once an epoch exists."""
    next_epoch: dict[str, Any] | None = None
    """Once an epoch exists: the next epoch's ``{"epoch", "samples", "target", "warning"}`` when its
    condition can never be met (``--min-samples`` above what the listing or a full cache holds),
    else None."""
    publish_paused: str | None = None
    """Folder view: why its publisher cannot write the folder now (its volume full); None while it
    publishes."""
    inflight_downloaded_bytes: int = 0
    """Bytes the downloads in progress have received so far, of their ``inflight_bytes``: status
    counts them in its fetch rate, so a large object's download is seen moving before it lands."""
    time: float = field(default_factory=time.time)

    def to_json(self) -> dict[str, object]:
        return asdict(self)
