"""The index's schema: its tables, the version they make, and the migrations from older ones.

Kept apart from :mod:`.index` (connections, transactions, meta and counters) because it changes on
its own clock: a column added here comes with its migration and a bump of ``SCHEMA_VERSION``, and
nothing else in the store needs to change with it. Migrations only add columns and indexes or fill
them in place; none rewrites every row of a large table.
"""

from __future__ import annotations

import sqlite3

from epochfs.sidecar.store.meta import Meta
from epochfs.sidecar.store.records import SIZE_ONLY

SCHEMA_VERSION = 7

SCHEMA = """  -- statements split at semicolons: none inside a comment
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS catalog (
    key TEXT PRIMARY KEY,          -- the remote key (relative to the remote root)
    path TEXT NOT NULL,            -- the path shown inside epoch-N/ (equal to key since schema 1)
    sid TEXT NOT NULL,             -- sample id: names the object file
    size INTEGER NOT NULL,
    version TEXT NOT NULL,         -- ETag / generation / mtime tag
    rank INTEGER NOT NULL,         -- position key in the sampling order (keyed hash of seed, key)
    pos INTEGER,                   -- catalog.SKIP_COUNTED: skip counted (schema 2: list position)
    skipped INTEGER NOT NULL DEFAULT 0,
    seen INTEGER NOT NULL DEFAULT 0  -- the listing generation that last saw the key (schema 3)
);
CREATE INDEX IF NOT EXISTS catalog_rank ON catalog(rank);
CREATE TABLE IF NOT EXISTS listing_parts (
    part INTEGER PRIMARY KEY,      -- one lister's share of the key space in the running listing
    prefix TEXT NOT NULL,          -- the listing prefix (relative to the remote root)
    start TEXT NOT NULL,           -- list keys after this one ('' = from the prefix's start)
    stop TEXT,                     -- keys from this one on belong to the next part (NULL = none)
    after TEXT NOT NULL,           -- the last key committed: a restart resumes after it
    done INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS samples (
    id INTEGER PRIMARY KEY AUTOINCREMENT,   -- admission order: eviction takes the smallest first
    sid TEXT NOT NULL UNIQUE,
    key TEXT NOT NULL UNIQUE,
    path TEXT NOT NULL,
    size INTEGER NOT NULL,
    checksum TEXT NOT NULL,        -- the manifest's: the digest if the remote vouched, else size-only
    version TEXT NOT NULL,
    admitted_at REAL NOT NULL,
    digest TEXT NOT NULL DEFAULT '',   -- algo:value of the bytes (bare hex: md5): the scrub's reference
    verified TEXT NOT NULL DEFAULT '',  -- what verified them against the remote (etag-md5, crc64nvme...)
    rank INTEGER                   -- the key's catalog rank when admitted (schema 4, NULL: unknown):
                                   -- schedule-mode epochs are ranges of (rank, key)
);
CREATE TABLE IF NOT EXISTS epochs (
    n INTEGER PRIMARY KEY,
    cut_at REAL NOT NULL,
    samples INTEGER NOT NULL,
    bytes INTEGER NOT NULL,
    new INTEGER NOT NULL,
    evicted INTEGER NOT NULL,
    max_sample INTEGER NOT NULL,   -- highest samples.id when cut: later samples are pending
    last_read REAL NOT NULL,       -- 0 until a reader records a read
    retired INTEGER NOT NULL DEFAULT 0,
    first_sample INTEGER,          -- set: the epoch is the samples with first_sample <= id <= max_sample,
                                   -- NULL: a window (lo_key set) or its rows in epoch_samples
    lo_rank INTEGER,               -- set (schema 4): a schedule-mode window, the samples with
    lo_key TEXT,                   -- (lo_rank, lo_key) <= (rank, key) <= (hi_rank, hi_key) and
    hi_rank INTEGER,               -- id <= max_sample, less its rows in epoch_excluded
    hi_key TEXT,
    listed INTEGER,                -- (schema 5) keys of this shard listed when it was cut, and
    estimated INTEGER              -- about how many the remote holds for it (NULL: not known)
);
-- Only epochs that are neither a range of the admission order nor a window (windows cut by schema
-- 3 or by a store whose samples' ranks disagree with the catalog's, epochs cut by schema 2) have
-- rows here.
CREATE TABLE IF NOT EXISTS epoch_samples (
    epoch INTEGER NOT NULL,
    sample INTEGER NOT NULL,
    PRIMARY KEY (epoch, sample)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS epoch_samples_sample ON epoch_samples(sample);
-- The cached samples inside a window's bounds that were not in it when it was cut: their keys had
-- left the catalog (a relist dropped them). A handful, not one row per sample.
CREATE TABLE IF NOT EXISTS epoch_excluded (
    epoch INTEGER NOT NULL,
    sample INTEGER NOT NULL,
    PRIMARY KEY (epoch, sample)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS epoch_excluded_sample ON epoch_excluded(sample);
CREATE TABLE IF NOT EXISTS cut_requests (n INTEGER PRIMARY KEY, requested_at REAL NOT NULL);
-- Samples whose object file is being fetched again in place (schema 6): damaged or missing, found
-- by the scrub or epochfs verify. The samples row stays, so every epoch keeps listing the sample.
CREATE TABLE IF NOT EXISTS repairs (
    sample INTEGER PRIMARY KEY,    -- samples.id
    lost INTEGER NOT NULL DEFAULT 0,  -- 1: cannot be repaired (the remote no longer has these bytes)
    since REAL NOT NULL
);
"""


SEEN_INDEX = "CREATE INDEX IF NOT EXISTS catalog_seen ON catalog(seen)"


def migrate_2_to_3(db: sqlite3.Connection) -> None:
    """Schema 2 numbered ``pos`` after a complete listing (its index goes) and had no listing
    generations: every row counts as seen by listing 0, complete when the catalog was numbered."""
    columns = {str(r[1]) for r in db.execute("PRAGMA table_info(catalog)")}
    if "seen" not in columns:
        db.execute("ALTER TABLE catalog ADD COLUMN seen INTEGER NOT NULL DEFAULT 0")
    db.execute("DROP INDEX IF EXISTS catalog_pos")
    db.execute(SEEN_INDEX)
    _put(db, Meta.LISTING_GENERATION, "0")
    if db.execute("SELECT 1 FROM meta WHERE name=?", (Meta.CATALOG_OBJECTS.value,)).fetchone():
        _put(db, Meta.LISTING_COMPLETE, "0")


def migrate_1_to_2(db: sqlite3.Connection) -> None:
    """Schema 1 recorded ``md5:<hex>`` of whatever arrived, verified or not. Keep that md5 as the
    scrub's digest; the manifest keeps vouching for it only where the ETag was that same md5 (the
    downloader had checked it), and says ``size-only`` for the rest (multipart ETags, files...)."""
    columns = {str(r[1]) for r in db.execute("PRAGMA table_info(samples)")}
    if "digest" not in columns:
        db.execute("ALTER TABLE samples ADD COLUMN digest TEXT NOT NULL DEFAULT ''")
    if "verified" not in columns:
        db.execute("ALTER TABLE samples ADD COLUMN verified TEXT NOT NULL DEFAULT ''")
    db.execute("UPDATE samples SET digest = substr(checksum, 5) WHERE checksum LIKE 'md5:%'")
    db.execute("UPDATE samples SET verified = 'etag-md5' WHERE digest != '' "
               "AND lower(trim(version, '\"')) = digest")
    db.execute("UPDATE samples SET verified = ?, checksum = ? WHERE verified = ''", (SIZE_ONLY, SIZE_ONLY))


def create(db: sqlite3.Connection) -> None:
    """Every table and index of :data:`SCHEMA` that is missing (inside a write transaction); the
    index on ``samples.rank`` and the window facts kept ahead (:data:`AHEAD`) too once the column
    is there (an older index gets them from :func:`migrate_3_to_4`)."""
    for statement in SCHEMA.split(";"):
        if statement.strip():
            db.execute(statement)
    if "rank" in {str(r[1]) for r in db.execute("PRAGMA table_info(samples)")}:
        db.execute(SAMPLES_RANK_INDEX)
        migrate_6_to_7(db)


def migrate_epochs_2_to_3(db: sqlite3.Connection) -> None:
    """Epochs may be ranges of the admission order: one column, NULL for the epochs already cut
    (they keep their ``epoch_samples`` rows until they retire). No row is rewritten."""
    columns = {str(r[1]) for r in db.execute("PRAGMA table_info(epochs)")}
    if "first_sample" not in columns:
        db.execute("ALTER TABLE epochs ADD COLUMN first_sample INTEGER")


SAMPLES_RANK_INDEX = "CREATE INDEX IF NOT EXISTS samples_rank ON samples(rank, key)"


def migrate_3_to_4(db: sqlite3.Connection) -> None:
    """Schedule-mode windows become bounds of the sampling order (``epochs.lo_rank``...) instead of
    one ``epoch_samples`` row per sample, which needs each sample's rank: filled from the catalog
    by key (a sample whose key the catalog no longer lists keeps NULL: it is in no window cut
    from now on, as it was in none before). Epochs already cut keep their rows until they retire."""
    columns = {str(r[1]) for r in db.execute("PRAGMA table_info(samples)")}
    if "rank" not in columns:
        db.execute("ALTER TABLE samples ADD COLUMN rank INTEGER")
    db.execute("UPDATE samples SET rank = (SELECT c.rank FROM catalog c WHERE c.key = samples.key) "
               "WHERE rank IS NULL")
    columns = {str(r[1]) for r in db.execute("PRAGMA table_info(epochs)")}
    for name, kind in (("lo_rank", "INTEGER"), ("lo_key", "TEXT"), ("hi_rank", "INTEGER"),
                       ("hi_key", "TEXT")):
        if name not in columns:
            db.execute(f"ALTER TABLE epochs ADD COLUMN {name} {kind}")
    db.execute(SAMPLES_RANK_INDEX)
    migrate_6_to_7(db)  # its triggers read samples.rank, there only from now on


def migrate_4_to_5(db: sqlite3.Connection) -> None:
    """Epochs record how much of the dataset the listing had seen when they were cut (their
    manifest's header says it): two columns, NULL for the epochs already cut."""
    columns = {str(r[1]) for r in db.execute("PRAGMA table_info(epochs)")}
    for name in ("listed", "estimated"):
        if name not in columns:
            db.execute(f"ALTER TABLE epochs ADD COLUMN {name} INTEGER")


def migrate_5_to_6(db: sqlite3.Connection) -> None:
    """The ``repairs`` table (made by :func:`create`): nothing to fill, an older epochfs dropped a
    damaged sample's row instead of repairing it in place."""


AHEAD_WHERE = ("(ahead.lo_rank, ahead.lo_key) <= ({0}.rank, {0}.key) "
               "AND ({0}.rank, {0}.key) <= (ahead.hi_rank, ahead.hi_key)")
"""SQL: the row named ``{0}`` (a catalog row, or a sample by its own rank) lies between the ends of
the window the ``ahead`` row tracks."""

_AT_BACK = "(ahead.hi_rank, ahead.hi_key) >= ({0}.rank, {0}.key)"
_CATALOG_OF = "(SELECT {1} FROM catalog c WHERE c.key = {0}.key)"


def _sample_trigger(name: str, event: str, row: str, sign: str) -> str:
    """A trigger that adds (``sign`` +) or takes away (-) the sample ``row`` (``new``/``old``) from
    the facts of the window tracked in ``ahead`` when its key is one of the window's keys (the
    catalog's row of its key lies between the ends), and from ``bounded`` when its own (rank, key)
    lies between them: the same sums :func:`.windows.scan` and the cut's count of the samples
    between the ends make, changed by one row."""
    in_window = f"EXISTS (SELECT 1 FROM catalog c WHERE c.key = {row}.key AND {AHEAD_WHERE.format('c')})"
    return (
        f"CREATE TRIGGER IF NOT EXISTS {name} AFTER {event} ON samples BEGIN "
        f"UPDATE ahead SET cached = cached {sign} 1, cached_bytes = cached_bytes {sign} {row}.size, "
        f"missing = missing {'-' if sign == '+' else '+'} {_CATALOG_OF.format(row, 'c.skipped = 0')}, "
        f"strays = strays {sign} {_CATALOG_OF.format(row, f'{row}.rank IS NOT c.rank')}, "
        f"newer = newer {sign} ({row}.id > ahead.prev_max) "
        f"WHERE ahead.valid AND {in_window}; "
        f"UPDATE ahead SET bounded = bounded {sign} 1 WHERE ahead.valid AND {AHEAD_WHERE.format(row)}; "
        "END"
    )


AHEAD = (
    """CREATE TABLE IF NOT EXISTS ahead (
    n INTEGER PRIMARY KEY,         -- the epoch whose window this row tracks (the next one)
    token INTEGER NOT NULL,        -- names one arming: a measurement is settled into its own only
    size INTEGER NOT NULL,         -- the schedule's size of window n and the epoch budget when
    budget INTEGER NOT NULL,       -- armed: the facts hold for that policy only
    whole INTEGER NOT NULL,        -- 1: the window is the whole catalog (a key added anywhere moves it)
    lo INTEGER, hi INTEGER,        -- positions [lo, hi) (NULL until measured)
    lo_rank INTEGER NOT NULL, lo_key TEXT NOT NULL,   -- the window's first catalog row and its
    hi_rank INTEGER NOT NULL, hi_key TEXT NOT NULL,   -- last, both in it
    prev_max INTEGER NOT NULL,     -- max_sample of the epoch below n when armed (for ``newer``)
    missing INTEGER NOT NULL DEFAULT 0,      -- the facts (windows.Span): changes since arming
    strays INTEGER NOT NULL DEFAULT 0,       -- until ``complete``, then the window's own
    cached INTEGER NOT NULL DEFAULT 0,
    cached_bytes INTEGER NOT NULL DEFAULT 0,
    bounded INTEGER NOT NULL DEFAULT 0,      -- samples whose own (rank, key) lies between the ends
    newer INTEGER NOT NULL DEFAULT 0,        -- samples of the window's keys with id > prev_max
    complete INTEGER NOT NULL DEFAULT 0,
    valid INTEGER NOT NULL DEFAULT 1         -- 0: a change the triggers cannot follow (measure again)
)""",
    _sample_trigger("ahead_sample_in", "INSERT", "new", "+"),
    _sample_trigger("ahead_sample_out", "DELETE", "old", "-"),
    "CREATE TRIGGER IF NOT EXISTS ahead_sample_change AFTER UPDATE OF id, key, rank, size ON samples "
    "WHEN old.id IS NOT new.id OR old.key IS NOT new.key OR old.rank IS NOT new.rank "
    "OR old.size IS NOT new.size BEGIN UPDATE ahead SET valid = 0 WHERE valid; END",
    "CREATE TRIGGER IF NOT EXISTS ahead_catalog_in AFTER INSERT ON catalog BEGIN "
    f"UPDATE ahead SET valid = 0 WHERE valid AND (whole OR {_AT_BACK.format('new')}); END",
    "CREATE TRIGGER IF NOT EXISTS ahead_catalog_out AFTER DELETE ON catalog BEGIN "
    f"UPDATE ahead SET valid = 0 WHERE valid AND {_AT_BACK.format('old')}; END",
    "CREATE TRIGGER IF NOT EXISTS ahead_catalog_change AFTER UPDATE OF rank, key, size, skipped ON catalog "
    "WHEN old.rank IS NOT new.rank OR old.key IS NOT new.key OR old.size IS NOT new.size "
    "OR old.skipped IS NOT new.skipped BEGIN "
    f"UPDATE ahead SET valid = 0 WHERE valid AND ({_AT_BACK.format('old')} OR {_AT_BACK.format('new')}); END",
)
"""The next schedule-mode window's facts, kept ahead of the cut (:mod:`.ahead`), and the triggers
that keep them exact in every transaction that changes what they count: a sample admitted or
evicted follows into the sums, and a catalog row changed at or before the window's back (which
moves positions, the budget's trim or a key's skip) or anywhere when the window is the whole
catalog marks them invalid. In the index, so every writer (the sampler, ``epochfs cut``, an older
process, a restore) keeps them, and a kill -9 leaves them as the data: both commit or neither."""


def migrate_6_to_7(db: sqlite3.Connection) -> None:
    """The ``ahead`` table and its triggers (:data:`AHEAD`): nothing to fill, a window's facts are
    measured when first needed (until then a cut reads its window by a scan)."""
    for statement in AHEAD:
        db.execute(statement)


def _put(db: sqlite3.Connection, key: Meta, value: str) -> None:
    db.execute("INSERT INTO meta(name, value) VALUES(?, ?) "
               "ON CONFLICT(name) DO UPDATE SET value=excluded.value", (key.value, value))
