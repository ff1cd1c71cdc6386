"""The listing side of the catalog: generations, each lister's progress, page commits, relists.

The listing (:mod:`epochfs.sidecar.listing`) writes the catalog through :class:`Listings`, one
page or one batch a transaction, and resumes from the parts kept here; the sampler's fetch order
reads the rows it wrote through :mod:`.catalog`. Apart from :mod:`.catalog` because the two have
different writers and different readers: this module is what a lister needs (its parts, its
pages, a relist's merge at the end), the other what the fetch order needs.
"""

from __future__ import annotations

from dataclasses import dataclass

from epochfs.sidecar.store.catalog import SHOWN, SKIPPED_CLASH, finalize
from epochfs.sidecar.store.index import Index, Meta
from epochfs.sidecar.store.records import CatalogRow

_KEEP_MARK = "CASE WHEN size IS ? AND version IS ? THEN pos END"
"""SQL (an UPDATE's value of ``pos``, given the listed size and version): the row's skip mark when
the listing did not change the object, else NULL."""


@dataclass
class Part:
    """One lister's share of the key space: keys under ``prefix`` after ``start`` and before
    ``stop``; ``after`` is the resume point the source gave with the last committed page."""

    part: int
    prefix: str
    start: str
    stop: str | None
    after: str = ""
    done: bool = False


@dataclass(frozen=True)
class PageRows:
    """One listed page as the catalog takes it: its part (with its new resume point), its rows,
    the skips it counted, earlier keys found to be folders, and the part it was split off."""

    part: Part
    rows: list[CatalogRow]
    skips: int
    clashes: list[str]
    cut_from: Part | None = None
    excluded: int = 0
    """Keys the include/exclude globs left out (the ``listing_excluded`` counter: status)."""


@dataclass(frozen=True)
class ListingState:
    generation: int
    """The running (or last) listing's generation."""
    complete: int | None
    """The newest generation that went to the end (None: no complete listing yet)."""
    source: str | None
    parts: list[Part]
    """The running listing's parts ([] when no listing is running)."""

    @property
    def running(self) -> bool:
        return any(not p.done for p in self.parts)


class Listings:
    """The listing side of the catalog: generations, each lister's progress, page commits, the
    merge at the end of a relist. Every write is one page or one batch: nothing rewrites the
    catalog, so a listing of 10M keys costs 10k small transactions, not one long one."""

    DROP_BATCH = 5000

    def __init__(self, ix: Index) -> None:
        self.ix = ix

    def state(self) -> ListingState:
        with self.ix.read() as db:
            gen = int(self.ix.get(Meta.LISTING_GENERATION) or 0)
            complete = self.ix.get(Meta.LISTING_COMPLETE)
            source = self.ix.get(Meta.LISTING_SOURCE)
            parts = [Part(int(r[0]), str(r[1]), str(r[2]), None if r[3] is None else str(r[3]),
                          str(r[4]), bool(r[5]))
                     for r in db.execute("SELECT part, prefix, start, stop, after, done "
                                         "FROM listing_parts ORDER BY part")]
        return ListingState(gen, None if complete is None else int(complete), source, parts)

    def begin(self, parts: list[Part], source: str) -> int:
        """Start a new listing generation over ``parts``; returns its generation."""
        with self.ix.write() as db:
            gen = int(self.ix.get(Meta.LISTING_GENERATION) or 0) + 1
            db.execute("DELETE FROM listing_parts")
            db.executemany(
                "INSERT INTO listing_parts(part, prefix, start, stop, after, done) VALUES(?,?,?,?,?,?)",
                [(p.part, p.prefix, p.start, p.stop, p.after, int(p.done)) for p in parts],
            )
            self.ix.put(Meta.LISTING_GENERATION, str(gen))
            self.ix.put(Meta.LISTING_SOURCE, source)
            self.ix.set_counter("listing_skips", 0)
            self.ix.set_counter("listing_excluded", 0)
        return gen

    def commit_page(self, gen: int, part: Part, rows: list[CatalogRow], *, skips: int,
                    clashes: list[str], cut_from: Part | None = None, progress: str | None = None) -> int:
        """One page (:meth:`commit_pages`); returns the number of keys new to the catalog."""
        return self.commit_pages(gen, [PageRows(part, rows, skips, clashes, cut_from)], progress=progress)[0]

    def commit_pages(self, gen: int, pages: list[PageRows], *, progress: str | None = None) -> list[int]:
        """Write pages' rows (marked seen by ``gen``) and their parts' progress in one transaction,
        so a restart resumes exactly after the last committed page of each part. A part split off
        another (``cut_from``) is written with its first page, with the other's new stop.
        ``progress``: what the listing knows (JSON, :data:`Meta.LISTING_PROGRESS`). Returns, a page
        each, the keys it made countable (:data:`SHOWN`): new to the catalog or a clash no more,
        less the keys it found to clash (so a first listing's sum is its keys, clashes left out)."""
        news = []
        update = f"UPDATE catalog SET size=?, version=?, seen=?, skipped=0, pos={_KEEP_MARK}"
        renew = f"{update}, rowid=(SELECT MAX(rowid) FROM catalog) + 1 WHERE key=?"
        with self.ix.write() as db:
            for page in pages:
                new = 0
                for r in page.rows:
                    args = (r.size, r.version, gen, r.size, r.version, r.key)
                    if db.execute(f"{update} WHERE key=? AND skipped=0", args).rowcount:
                        continue
                    if db.execute("INSERT INTO catalog(key, path, sid, size, version, rank, seen) "
                                  "VALUES(?,?,?,?,?,?,?) ON CONFLICT(key) DO NOTHING",
                                  (r.key, r.key, r.sid, r.size, r.version, r.rank, gen)).rowcount:
                        new += 1
                        continue
                    # A key listed again is a key to fetch again: a skip (a download that kept
                    # failing, an object over the volume's size) is this listing's to make anew,
                    # or one outage, or one rewritten object, would leave it out of every epoch.
                    # (The skip stays counted when the object is unchanged: SKIP_COUNTED.) The row
                    # is numbered as one listed now (refill): owed to the pass when its rank is
                    # behind the cursor, as a new key is. Cleared in place, it kept its old rowid,
                    # which the pass had offered, and waited for the next pass over the order.
                    if db.execute(f"{renew} AND {SHOWN}", args).rowcount:
                        continue
                    if db.execute(renew, args).rowcount:  # a clash row: counted again unless
                        new += 1  # this listing finds the clash again (below, or a later page)
                for key in page.clashes:  # written with this page or an earlier one: also a folder
                    # A skip of this listing, counted with the others at its end: a relist that
                    # finds the same clash again does not count it again.
                    if db.execute(f"UPDATE catalog SET skipped=? WHERE key=? AND {SHOWN}",
                                  (SKIPPED_CLASH, key)).rowcount:
                        new -= 1  # counted as a key until now (catalog_objects' running total)
                        self.ix.bump("listing_skips", 1)
                    elif db.execute("SELECT 1 FROM catalog WHERE key=?", (key,)).fetchone():
                        self.ix.bump("listing_skips", 1)
                for p in (page.part, page.cut_from) if page.cut_from is not None else (page.part,):
                    db.execute("INSERT INTO listing_parts(part, prefix, start, stop, after, done) "
                               "VALUES(?,?,?,?,?,?) ON CONFLICT(part) DO UPDATE SET stop=excluded.stop, "
                               "after=excluded.after, done=excluded.done",
                               (p.part, p.prefix, p.start, p.stop, p.after, int(p.done)))
                if page.skips:
                    self.ix.bump("listing_skips", page.skips)
                if page.excluded:
                    self.ix.bump("listing_excluded", page.excluded)
                news.append(new)
            if progress is not None:
                self.ix.put(Meta.LISTING_PROGRESS, progress)
            if sum(news):
                total = max(0, int(self.ix.get(Meta.CATALOG_OBJECTS) or 0) + sum(news))
                self.ix.put(Meta.CATALOG_OBJECTS, str(total))
        return news

    def finish(self, gen: int) -> tuple[int, int]:
        """The listing ``gen`` went to the end: drop the rows it did not see (keys deleted from the
        remote, a few thousand per transaction), count its skips once, record it complete.
        Returns (keys in the catalog, keys dropped). Cached samples of dropped keys stay until
        evicted (a live epoch never changes); they are not fetched again."""
        dropped = 0
        while True:
            with self.ix.write() as db:
                n = db.execute("DELETE FROM catalog WHERE key IN (SELECT key FROM catalog "
                               "WHERE seen < ? LIMIT ?)", (gen, self.DROP_BATCH)).rowcount
            dropped += n
            if n < self.DROP_BATCH:
                break
        skips = self.ix.counter("listing_skips")
        with self.ix.write() as db:
            counted = int(self.ix.get(Meta.CATALOG_SKIPS_COUNTED) or 0)
            if skips > counted:  # a relist must not count again what an earlier listing counted
                self.ix.bump("skipped_total", skips - counted)
                self.ix.put(Meta.CATALOG_SKIPS_COUNTED, str(skips))
            db.execute("DELETE FROM listing_parts")
        return finalize(self.ix), dropped

    def relist_requests(self) -> int:
        """Relists asked for so far (``epochfs relist``); the listing thread serves new ones."""
        return self.ix.counter("relist_requests")

    def request_relist(self) -> int:
        with self.ix.write():
            self.ix.bump("relist_requests", 1)
        return self.ix.counter("relist_requests")
