"""``epochfs sample``: the command around the loop.

Order of a run: fork the listing process (``--list-process``, before any SQLite connection or
thread: :func:`~epochfs.sidecar.listing.child.fork_child`), send a new cache's first LIST
(:func:`_first_list_ahead`), open or create the cache, hold its sampler lock, check the index (a damaged one,
a garbage page say, is moved aside and replaced by a fresh one in one log line, see
:mod:`epochfs.sidecar.store.reset`), remove the outage record a run killed mid-outage left
(:class:`~.outagerecord.OutageRecord`), check that the cache belongs to this (remote, seed, shard), run
recovery (and log what it repaired), record the policy, then run the
:class:`~epochfs.sidecar.sampler.loop.Sampler` until SIGTERM/SIGINT with the listing beside it
(:class:`~epochfs.sidecar.listing.ListingThread`): a complete catalog is fetched from at once (no
listing before fetching), an unfinished listing resumes, a new one starts; relists run every
``--relist-interval`` seconds and when ``epochfs relist`` asks. The listers write the catalog
through a Store of their own (a second connection and lock), so that the fetch loop's reads never
wait behind a page commit (docs/listing.md, "The listing and the fetches on one CPU").

Exit status: 0 after a clean stop, 2 for bad settings (ConfigError: among them a remote that
answers the first listing with a refusal, no such bucket or folder, access denied, credentials it
does not accept, or whose host does not exist; the line names the flag, the store's answer and
what to check: :func:`~.refusals.refusal_message`), 75 (:data:`~epochfs.sidecar.config.EXIT_RETRY`) when
the remote cannot be reached at the start (a store still starting, a DNS server that cannot
answer now: :func:`~epochfs.sidecar.remote.errors.may_answer_later`), 74
(:data:`~epochfs.sidecar.config.EXIT_INDEX`) when SQLite finds the index damaged while running or
during the start (the start's check of a large index reads the ends of each b-tree only, and
recovery or the fetch order's resume may read a damaged page between: :func:`index_failed`; the
next start replaces it within seconds: the supervisor restarts at once and counts no crash),
1 when the node volume or the index fails otherwise (one log line; the next start repairs what it
can, so a restart is not a crash loop).
"""

from __future__ import annotations

import logging
import os
import signal
import sqlite3
import threading
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn

from epochfs.sidecar import samplerlock
from epochfs.sidecar.config import EXIT_INDEX, ConfigError, RetryLater, SamplerSettings
from epochfs.sidecar.download import LocalWriteError
from epochfs.sidecar.listing import Lister, ListingThread
from epochfs.sidecar.listing.capacity import check_capacity
from epochfs.sidecar.listing.indexfile import IndexSource, listing_source, written_from_elsewhere
from epochfs.sidecar.listing.paged import PagedSource
from epochfs.sidecar.remote import Remote, RemoteError, open_remote
from epochfs.sidecar.remote.errors import may_answer_later
from epochfs.sidecar.sampler.diskspace import is_disk_full
from epochfs.sidecar.sampler.identity import check_identity, recorded_listing
from epochfs.sidecar.sampler.loop import INDEX_DELETED, Sampler
from epochfs.sidecar.sampler.outagerecord import OutageRecord
from epochfs.sidecar.sampler.preload import preload_after_first_request
from epochfs.sidecar.sampler.refusals import one_line, refusal_message
from epochfs.sidecar.sampler.shutdown import STOP_GRACE
from epochfs.sidecar.sampler.startstop import closed_on_stop
from epochfs.sidecar.signals import set_from_handler
from epochfs.sidecar.store import INDEX_NAME, Meta, NoRoom, Store, StoreError, checkmark, publisherlock
from epochfs.sidecar.store.index import free_bytes, is_corruption

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from epochfs.sidecar.listing.child import Forked
    from epochfs.sidecar.listing.process import ListingProcess

log = logging.getLogger("epochfs.sampler")


def _install_signals(stop: threading.Event) -> list[tuple[signal.Signals, Any]]:
    """SIGTERM/SIGINT set the stop flag (only possible on the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return []
    old: list[tuple[signal.Signals, Any]] = []
    noted: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        if noted:
            return  # a second signal (the supervisor's, then PDEATHSIG's): one stop is enough
        noted.append(signum)
        set_from_handler(stop, then=lambda: log.info(
            "signal %d: stopping (finishing or abandoning downloads in flight)", signum))

    for sig in (signal.SIGTERM, signal.SIGINT):
        old.append((sig, signal.signal(sig, handler)))
    return old


def _end_forked(forked: tuple[Forked, Connection]) -> None:
    """End a forked listing child that no listing process took (the start failed before)."""
    from epochfs.sidecar.listing.child import end_child

    end_child(forked)


def index_failed(e: StoreError | sqlite3.DatabaseError, cache: Path, *, checked: bool = True) -> int:
    """Log the one line of a sampler whose index failed, at its start or while it ran, and return
    its exit status: :data:`~epochfs.sidecar.config.EXIT_INDEX` when the index is damaged (the
    next start checks it in full and replaces it, so the supervisor restarts at once and counts
    no crash), else 1. Damage is SQLite's corruption error, or the :mod:`.checkmark` marker that
    whatever met the damage wrote (the background check's finding reaches the loop as a
    StoreError). ``checked``: the start's index check has passed, which removes a marker found
    before it, so a marker now was written by this run; before that, a marker left from an
    earlier run says nothing of this failure (an unreadable volume is no damage)."""
    if isinstance(e, NoRoom):  # no damage: the supervisor restarts it after its backoff
        raise RetryLater(f"--cache: {e}") from None
    corrupt = is_corruption(e)
    if not corrupt and not os.path.lexists(cache / INDEX_NAME):
        # A write met the deletion (SQLite's disk I/O error) before the loop's look did.
        log.error("%s", e if str(e) == INDEX_DELETED else f"{INDEX_DELETED} ({e})")
        return 1
    log.error("the cache index failed: %s; exiting (the next start repairs it)", e)
    if corrupt:
        # The next start replaces the index only where the marker asks for the full check; a
        # corruption met through a statement that does not mark (a checkpoint, the integrity
        # check itself) would otherwise pass the cheap check again and exit 74 again.
        checkmark.mark(cache, str(e))
        return EXIT_INDEX
    return EXIT_INDEX if checked and checkmark.reason(cache) is not None else 1


def no_room(e: BaseException, cache: Path) -> NoReturn:
    """A start whose first index write found the volume full (SQLITE_FULL, ENOSPC): no damage,
    a wait, as where the index could not be opened at all (:class:`NoRoom`). An index a kill -9
    left with its shared-memory file and write-ahead log opens on a full volume, and its first
    write fails instead: without this, that start exited 1 saying the index failed."""
    left = free_bytes(cache)
    free = "free space unknown" if left is None else f"{left} bytes free"
    raise RetryLater(f"--cache: {cache / INDEX_NAME}: the cache's volume is full ({free}), so the "
                     f"index cannot be written at the start ({one_line(str(e))}); waiting for "
                     "room") from None


def _open_remote(settings: SamplerSettings) -> Remote:
    return open_remote(settings.remote, endpoint_url=settings.endpoint_url, index_url=settings.index_url,
                       concurrency=settings.concurrency, read_timeout=settings.read_timeout)


def _first_list_ahead(settings: SamplerSettings) -> Remote | None:
    """The remote of a new cache (no index yet) on S3, its listing's first request already sent
    (:meth:`.S3Remote.list_page_ahead`), or None (then opened and listed after the index).

    A new cache begins with a new listing, and its first request is the first page of the whole
    remote (the discovery's, :meth:`.PagedSource.spans`), which waits for nothing the index
    holds: sent before the index is created, checked and recovered, its round trip overlaps that
    work instead of following it, on the way to the first object GET. An index, even a damaged
    one, may hold a listing to resume or a complete one: the index is read first then. A remote
    that cannot be opened here is opened again where a refusal is answered (exit 2 or 75)."""
    new = not (settings.cache / INDEX_NAME).exists()
    if settings.index_url or not settings.remote.startswith("s3://") or not new:
        return None
    try:
        remote = _open_remote(settings)
    except RemoteError:
        return None
    from epochfs.sidecar.remote.s3 import S3Remote  # imported by open_remote: no cost

    assert isinstance(remote, S3Remote)  # the registry's backend of s3://
    preload_after_first_request(remote)  # the first download's imports, once the LIST is sent
    remote.list_page_ahead("")
    return remote


def run_sample(settings: SamplerSettings) -> int:
    """The ``epochfs sample`` command: 0 after a clean stop, 2 for bad settings, 75 while the remote
    cannot be reached at the start, 74 when the index is found damaged (at the start or while
    running), 1 when the disk or the index fails otherwise."""
    stop = threading.Event()
    forked: tuple[Forked, Connection] | None = None
    # Before the fork: a Ctrl-C or SIGTERM from then on sets ``stop`` (the child's copy of it,
    # in the child, which ignores both from its first step), never a KeyboardInterrupt that
    # would leave a child waiting.
    old_signals = _install_signals(stop)
    remote: Remote | None = None
    try:
        if settings.list_process:
            # Imported here (multiprocessing, subprocess): a sampler listing on threads never needs it.
            from epochfs.sidecar.listing.child import fork_child

            # Forked before the first SQLite connection and before any thread (the first LIST's
            # below): the child has the listing's modules imported, where a fresh interpreter
            # imports them again first, and is ready by the time the discovery below is done.
            forked = fork_child()
        remote = _first_list_ahead(settings)
        store = Store(settings.cache, create=True)
        publisherlock.at_sampler_start(store.root)  # a leftover lock matters only with a folder view
    except Exception:
        if forked is not None:
            _end_forked(forked)
        if remote is not None:
            remote.close()
        for sig, h in old_signals:
            signal.signal(sig, h)
        raise
    asked_ahead = remote is not None
    lock_fd: int | None = None
    catalog_store: Store | None = None
    listing_process: ListingProcess | None = None
    # What the listing and the sampler share, made before either: the listing sets ``running``
    # while it adds keys (the fetch order then looks for new keys sooner); the listers ask
    # ``fetching`` before each commit (while the sampler fetches they leave it the index a share
    # of the time). The listers are made before the sampler (the listing's discovery comes
    # first, and a listing process starts sooner still), so ``fetching`` answers False until
    # the sampler is made, as no sampler fetches before then.
    listing_running = threading.Event()
    sampler: Sampler | None = None
    checked = False  # the start's check of the index passed (or replaced it)

    def fetching() -> bool:
        return sampler is not None and sampler.fetching()

    try:
        lock_fd = samplerlock.hold(settings.cache)
        store.check_index()  # a damaged index is replaced (one log line), never a crash loop
        checked = True
        # Before this start waits on the remote (a slow listing, a remote still down): status
        # sees a sampler hold the lock meanwhile, and would show a dead run's record as this one's.
        outage = OutageRecord(store)
        check_identity(store, settings)
        log.info("%s", store.recover(integrity="ok"))
        store.configure(settings.policy())
        # The listers write the catalog through a connection (and lock) of their own, opened once
        # the index is checked and recovered: the fetch loop's reads never wait behind a page
        # commit (WAL: readers do not block on the writer), and its writes wait in SQLite only.
        catalog_store = Store(settings.cache)
        if settings.list_process:  # the listing's CPU beside the fetches, not under their GIL
            from epochfs.sidecar.listing.process import ListingProcess

            listing_process = ListingProcess(settings, stop=stop, grace=STOP_GRACE,
                                             served=catalog_store.listings().relist_requests(),
                                             running=listing_running, fetching=fetching, forked=forked)
            forked = None  # the listing process's now: it ends it
            listing_process.spawn()  # its start-up overlaps the discovery pages below
        try:
            if remote is None:
                remote = _open_remote(settings)
            try:
                source = listing_source(settings, remote, stop=stop)
            except RemoteError as e:
                source = recorded_listing(settings, catalog_store, e)
            if elsewhere := written_from_elsewhere(source, settings.remote):
                log.warning("%s", elsewhere)
            lister = Lister(catalog_store, source, seed=settings.seed,
                            shard_index=settings.shard_index, shard_count=settings.shard_count,
                            object_limit=settings.object_limit, threads=settings.list_threads, stop=stop,
                            include=settings.include, exclude=settings.exclude, yield_to=fetching)
            if not asked_ahead:
                preload_after_first_request(remote)  # the first download's imports, beside the first LIST
            # Finding the spans lists a little here (S3's folders; a walking remote's first
            # request: gs://, az://), so a remote that cannot be listed at all is a bad setting
            # (exit 2); the pages are listed beside the sampler.
            with closed_on_stop(remote, stop):  # a SIGTERM never waits for a silent store's answer
                prepared = lister.prepare() if lister.needed() else None
        except RemoteError as e:
            if stop.is_set():  # SIGTERM while a throttled discovery page waited: a clean stop
                log.info("stopped while finding the remote's folders (%s)", e)
                return 0
            if may_answer_later(e):  # exit EXIT_RETRY: the sidecar starts the sampler again, no crash
                raise RetryLater(f"the remote cannot be reached now: {one_line(str(e))}") from None
            raise ConfigError(refusal_message(settings, e)) from None
        if prepared is None:
            log.info("catalog of %s keys complete: fetching at once (relist: %s)",
                     store.meta(Meta.CATALOG_OBJECTS) or "0",
                     f"every {settings.relist_interval:.0f}s" if settings.relist_interval
                     else "on request, epochfs relist")
        if (listing_process is not None and prepared is not None
                and isinstance(lister.source, PagedSource) and lister.source.fits_one_page):
            # The listing is the pages the discovery read: a process would list them again after
            # its start-up (0.5-1.6 s before the first GET, measured with 160 objects). Ended
            # before the sampler is made: its start-up's CPU would slow the sampler's (the metrics'
            # first import among it) on the way to the first object GET.
            listing_process.close()
            listing_process = None
        sampler = Sampler(
            store=store,
            remote=remote,
            settings=settings,
            stop=stop,
            progress_every=settings.progress_seconds,
            outage=outage,
            listing=listing_running.is_set,
        )
        listing: ListingThread | ListingProcess
        if listing_process is not None:
            listing = listing_process
            header = lister.source.header if isinstance(lister.source, IndexSource) else None
            first = lister.source.first_page if isinstance(lister.source, PagedSource) else None
            listing.start(prepared, index_header=header, first_page=first)
        else:
            listing = ListingThread(lister, interval=settings.relist_interval, prepared=prepared,
                                    on_complete=lambda report: check_capacity(settings, report),
                                    running=listing_running)
            if prepared is not None:
                listing.running.set()  # until the thread takes over: the first pages come soon
            listing.start()
        try:
            sampler.run()
        except LocalWriteError as e:
            log.error("the node volume failed: %s", e)
            return 1
        except (StoreError, sqlite3.DatabaseError) as e:
            # A damaged index is replaced at the next start (check_index), a deleted one remade.
            return index_failed(e, settings.cache)
        finally:
            stop.set()
            # A listing process gets its grace to stop and then is killed (ListingProcess._drain):
            # joined a little longer than that, and closed below before the cache is let go.
            listing.join(timeout=STOP_GRACE + 1.0 if listing is listing_process else STOP_GRACE)
        if listing.fatal is not None:
            raise listing.fatal
        log.info("stopped cleanly")
        return 0
    except (StoreError, sqlite3.DatabaseError) as e:
        if sampler is not None:
            raise  # past the start: the run's own failures are handled above
        # Met during the start: the check of a large index reads only the ends of each b-tree,
        # and recovery, the listing's set-up or the fetch order's resume read the pages between.
        # The same exit and line as damage met while running.
        if is_disk_full(e):
            no_room(e, settings.cache)
        return index_failed(e, settings.cache, checked=checked)
    finally:
        if forked is not None:
            _end_forked(forked)  # the start failed before the listing process took it
        if listing_process is not None:
            listing_process.close()  # one spawned for a listing that was never started
        if remote is not None:
            remote.close()
        if catalog_store is not None:
            catalog_store.close()
        store.close()
        if lock_fd is not None:
            os.close(lock_fd)
        for sig, h in old_signals:
            signal.signal(sig, h)


