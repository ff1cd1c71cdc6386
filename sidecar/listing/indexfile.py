"""One listing for a fleet: ``epochfs index`` writes the remote's keys to a file once, and every
sidecar given ``--index URL`` reads them from it instead of listing the remote.

The format is gzip'd JSON lines, read as a stream (memory bounded by one line, whatever the number
of keys)::

    {"epochfs_index": 1, "remote": "s3://b/p", "sorted": false, "order": "shuffled", "created": 1767225600}
    {"k": "class-0001/0000.jpg", "s": 16384, "v": "9b2cf535f27731c974343645a3985328"}
    {"kb": "<base64 of a key that is not UTF-8>", "s": 1, "v": ""}
    {"end": true, "count": 2}

The header carries the format version (a newer one is refused with a clear message); the trailer
proves the file is whole: a truncated index is an error, never a listing that ends early (its end
would drop every key it did not reach). A record that cannot be read (:func:`.records.read_record`) is
skipped, counted and logged with its line (:class:`.records.Unreadable`), and still counts for the
trailer; a blank line is no record. Records are written shuffled (:mod:`.indexorder`: every
prefix a uniform sample, so a sidecar's first epochs are fair while it reads), file/folder clashes
left out by the writer; an index in key order (``"sorted": true``, earlier versions) has its
clashes found by the reader, as in a listing. The URL is any fsspec URL (``file://``,
``http(s)://``, ``gs://``...) or ``s3://`` (read and written with the remote's own S3 client).
An S3 Inventory ``manifest.json`` is accepted as an index too (:mod:`.inventory`).

A fleet reads one index at once, so its header GET is where a store throttles first: a throttled
header read (S3 ``SlowDown``, 429) is tried again after a full-jitter pause until the sampler
stops, instead of ending the sampler (which the supervisor restarted into the same throttle).
``epochfs index`` itself reads a throttled page again the same way instead of failing: the
folders' discovery in place, a listing page by pausing the listing and resuming each part from
its last written page (:func:`write_index`).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import logging
import os
import random
import re
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import IO, Any

from epochfs.sidecar.listing.filter import CatalogReport
from epochfs.sidecar.listing.indexorder import write_shuffled
from epochfs.sidecar.listing.lister import Lister
from epochfs.sidecar.listing.paged import PagedSource
from epochfs.sidecar.listing.records import BadRecord, Unreadable, json_object, read_record
from epochfs.sidecar.listing.resume import AGAIN, Prefix, changed, counted_point
from epochfs.sidecar.listing.retry import while_throttled
from epochfs.sidecar.listing.sinks import IndexSink, object_record
from epochfs.sidecar.listing.sources import PAGE, Source, source_for
from epochfs.sidecar.listing.span import Page, Span
from epochfs.sidecar.progressbar import Progress
from epochfs.sidecar.redact import redact
from epochfs.sidecar.remote import BLOCK, Remote, RemoteError, RemoteObject, objects
from epochfs.sidecar.remote.urls import same_remote
from epochfs.sidecar.store.prefixfix import prefix_fix

log = logging.getLogger("epochfs.catalog")

FORMAT_VERSION = 1
HEAD_LIMIT = 4096
"""Bytes of a file's first line read to tell an epochfs index from a plain key list."""
HEADER_RETRY = (0.5, 30.0)
"""First and longest bound of the full-jitter pause before a throttled header read is tried again."""
INDEX_RETRY = (0.5, 30.0)
"""The same for a throttled page while ``epochfs index`` lists: the listing pauses, every lister,
the bound doubling with each throttled page of the build, then resumes each part from its last
written page (so nothing is written twice)."""


def open_stream(url: str, *, endpoint_url: str | None = None) -> contextlib.AbstractContextManager[IO[bytes]]:
    """The index at ``url`` opened for streamed reading (gunzipped when it is gzip), through the
    remote package's one opener (:func:`epochfs.sidecar.remote.objects.open_stream`); a failure
    to open it names it "the index"."""
    return objects.open_stream(url, endpoint_url=endpoint_url, what="the index", gunzip=True)


def is_index(url: str, *, endpoint_url: str | None = None) -> bool:
    """True when ``url`` holds an epochfs index: its first line (read up to ``HEAD_LIMIT`` bytes,
    so a plain key list with a long first line costs no more) is a JSON object with an
    ``epochfs_index`` key, wherever that key is in it (a header written with sorted keys starts
    with another)."""
    try:
        with open_stream(url, endpoint_url=endpoint_url) as f:
            head = f.readline(HEAD_LIMIT)
    except (RemoteError, OSError):
        return False
    try:
        header = json.loads(head)
    except ValueError:  # not JSON, or not UTF-8 (UnicodeDecodeError is a ValueError)
        return False
    return isinstance(header, dict) and "epochfs_index" in header


class IndexSource:
    """Keys from an ``epochfs index`` file: one span, a resume point is the lines consumed and
    their digest (:mod:`.resume`)."""

    def __init__(self, url: str, *, endpoint_url: str | None = None, page: int = PAGE,
                 stop: threading.Event | None = None, rng: random.Random | None = None,
                 header: dict[str, Any] | None = None) -> None:
        """``stop``: a throttled header read is tried again until it is set (None: not retried).
        ``header``: the header another reader of the same index read (the sampler's, handed to
        its listing process): not read again, one GET fewer for the node and the fleet."""
        self.url = url
        self.name = "index:" + redact(url)
        self.endpoint_url = endpoint_url
        self.page = page
        self.unreadable = Unreadable(f"index {redact(url)}")
        self.sorted_listing = True
        self.shuffled = False
        self.header = header if header is not None else self._read_header(stop, rng or random.Random())
        self.sorted_listing = bool(self.header.get("sorted"))
        self.shuffled = self.header.get("order") == "shuffled"
        if self.header.get("created") is not None:
            # An index written again at the same URL (another order: each shuffled index has a
            # salt of its own) is another source, listed afresh. Without "created" (written by
            # hand), or rewritten under a running listing, the resume point's digest of the lines
            # committed tells (:meth:`pages`): the count alone resumed in another file's lines.
            self.name += f" (written {self.header['created']})"

    def _read_header(self, stop: threading.Event | None, rng: random.Random) -> dict[str, Any]:
        def read() -> dict[str, Any]:
            with open_stream(self.url, endpoint_url=self.endpoint_url) as f:
                return self._header(f.readline())

        return while_throttled(read, stop=stop, rng=rng, bounds=HEADER_RETRY, log=log,
                               what=f"reading the index header of {redact(self.url)}")

    def _header(self, line: bytes) -> dict[str, Any]:
        try:
            header = json.loads(line)
        except ValueError:
            header = None
        if not isinstance(header, dict) or "epochfs_index" not in header:
            raise RemoteError(f"{redact(self.url)} is not an epochfs index (no header line)")
        if header["epochfs_index"] != FORMAT_VERSION:
            raise RemoteError(f"{redact(self.url)}: index format {header['epochfs_index']}, this epochfs "
                              f"reads {FORMAT_VERSION}: write it again with this version's epochfs index")
        return header

    def spans(self) -> list[Span]:
        return [Span("", "", None)]

    def pages(self, span: Span, after: str) -> Iterator[Page]:
        """The records after the resume point ``after``: the lines past the header that the
        listing committed, with their digest (:mod:`.resume`: lines, so a blank line, which is no
        record, resumes in the same place). Those lines are read again and skipped only when they
        are the very lines committed: an index written again at the URL (rewritten in another
        order, or by hand, with or without its header's ``created``) fails the run, named anew,
        and the run tried again lists it afresh; an index that grew past them resumes. A record
        that cannot be read is skipped and counted (:class:`Unreadable`), and still counts as a
        record for the trailer, which counts what the writer wrote: a lost record is still found."""
        skip, digest = counted_point(after) or (0, "")  # an earlier version's count: from the start
        where = self.unreadable.name
        records = skipped = first = in_page = 0
        batch: list[RemoteObject] = []
        read, other = Prefix(), False
        lines: list[bytes] = []  # read since the last page, digested with it
        with open_stream(self.url, endpoint_url=self.endpoint_url) as f:
            self._header(f.readline())
            for i, line in enumerate(f):
                number = i + 2  # the file's line number: the header is line 1
                record = json_object(line) if line.strip() else None
                if i < skip and isinstance(record, dict) and "end" in record:
                    break  # the index ends before the lines committed: another file
                lines.append(line)
                if i + 1 == skip:
                    read.add_lines(lines)
                    lines = []
                    if read.digest != digest:
                        other = True  # other lines than those committed: another file
                        break
                if record is None:
                    continue  # not a record (a hand-edited index's blank line): nothing lost
                if isinstance(record, dict) and "end" in record:
                    self._check_trailer(record, records, number)
                    if skipped:
                        Unreadable.report(where, skipped, f"line {first}")
                    read.add_lines(lines)
                    yield Page(batch, read.point(), True, in_page)
                    return
                records += 1
                if i < skip:
                    continue  # resumed: committed before the restart
                try:
                    batch.append(read_record(record))
                except BadRecord as e:
                    skipped += 1
                    in_page += 1
                    first = first or number
                    self.unreadable.skip(f"{where} line {number}", str(e))
                if len(batch) >= self.page:
                    read.add_lines(lines)
                    lines = []
                    yield Page(batch, read.point(), False, in_page)
                    batch, in_page = [], 0
        read.add_lines(lines)
        if other or read.count < skip:
            raise changed(self, f"the index {redact(self.url)}", read, skip)
        raise RemoteError(f"{redact(self.url)} ends without its trailer: the index is truncated "
                          "(write it again); the listing is not finished from it")

    def _check_trailer(self, trailer: dict[str, Any], records: int, number: int) -> None:
        count = trailer.get("count")
        if type(count) is not int:
            raise RemoteError(f"{redact(self.url)} line {number}: the trailer's count {count!r} is not a "
                              "number: the index cannot be proven whole (write it again)")
        if count != records:
            raise RemoteError(f"{redact(self.url)} line {number}: the trailer counts {count} record(s), "
                              f"the file holds {records}: write the index again")


def listing_source(settings: Any, remote: Remote, *, stop: threading.Event | None = None,
                   index_header: dict[str, Any] | None = None) -> Source:
    """What the sampler lists from: ``--index`` (an epochfs index or an S3 Inventory manifest)
    when given, except an http(s) remote's plain key list; else the remote itself. ``stop``: a
    throttled index header, or a throttled page that finds the folders, is read again until it is
    set. ``index_header``: an epochfs index's header already read (:class:`IndexSource`)."""
    url = settings.index_url
    if url:
        if url.rstrip("/").endswith("manifest.json"):
            from epochfs.sidecar.listing.inventory import InventorySource

            return InventorySource(url, remote_url=settings.remote, endpoint_url=settings.endpoint_url)
        if index_header is not None:
            return IndexSource(url, endpoint_url=settings.endpoint_url, stop=stop, header=index_header)
        # Imported here: the http(s) remote (and fsspec's error types) is not on the way of an S3
        # sampler's first GET, which every other remote takes through this function.
        from epochfs.sidecar.remote.httpindex import HTTPRemote

        if not isinstance(remote, HTTPRemote) or is_index(url, endpoint_url=settings.endpoint_url):
            return IndexSource(url, endpoint_url=settings.endpoint_url, stop=stop)
    return source_for(remote, stop=stop)


def recorded_index(url: str, *, endpoint_url: str | None, recorded: str | None) -> IndexSource | None:
    """The epochfs index a cache's listing was recorded from (``recorded``: its listing's name),
    made from that name rather than the file: at a start that cannot read ``url`` (an index
    deleted or rotated since, a store down), a complete catalog listed from it is still the
    listing, and refusing the start would stop every node of a fleet at its next restart. None
    when ``recorded`` is not an index at ``url``. Its next read (a relist) reads the file again."""
    name = "index:" + redact(url)
    if recorded is None or not recorded.startswith(name):
        return None
    header: dict[str, Any] = {"epochfs_index": FORMAT_VERSION}
    rest = recorded[len(name):]
    written = re.match(r" \(written ([^)]*)\)", rest)
    if written is not None:
        header["created"] = written[1]  # the name's own text: the same name again
        rest = rest[written.end():]
    source = IndexSource(url, endpoint_url=endpoint_url, header=header)
    again = AGAIN.match(rest)  # listed afresh after the index changed under a listing (:mod:`.resume`)
    if again is not None:
        source.name += again[0]
    return source


def written_from_elsewhere(source: object, remote: str) -> str | None:
    """Why an epochfs index ``source`` may not list ``remote``: its header names another remote
    (``epochfs index`` of another dataset, or of a mirror), whose keys are then fetched from
    ``remote`` (all of them 404, skipped, for an unrelated one); None when it names ``remote`` or
    nothing, or ``source`` is no epochfs index. A warning, not a refusal: a mirror's index is a
    legitimate use."""
    if not isinstance(source, IndexSource):
        return None
    written = source.header.get("remote")
    if not isinstance(written, str) or same_remote(written) == same_remote(redact(remote)):
        return None
    return (f"--index {redact(source.url)} was written from {written}, not --remote {redact(remote)}: its "
            "keys are fetched from --remote (a key that is not there is skipped as missing)")


# ---------------------------------------------------------------------------- writing
def write_index(remote: Remote, out: str, *, threads: int = 8, endpoint_url: str | None = None,
                progress_seconds: float = 5.0, progress: Progress | None = None, plain: bool = False,
                order: str = "shuffled") -> int:
    """List ``remote`` with ``threads`` listers and write its index to ``out``; returns the key
    count. ``progress``: a bar of the spans done on a terminal (``epochfs index``); else, and
    without one, a log line every ``progress_seconds``. ``plain``: JSON lines, not gzip (an
    ``--out`` whose name does not end in ``.gz``; readers take either, by the first bytes).

    The sampler's :class:`~.lister.Lister` and planner list, in full pages, into an
    :class:`~.sinks.IndexSink`: each part's records in a gzip file of its own in a temporary
    folder, a span split at its estimated middles as the planner learns it, so a flat bucket (one
    span) lists on every thread. A throttled page pauses the listing (a full-jitter pause,
    ``INDEX_RETRY``: :func:`~.retry.while_throttled`, as the header and the discovery) and resumes
    it from each part's last written page; any other failure ends it. The records are then
    written between the header and the trailer in ``order``: ``shuffled`` (:mod:`.indexorder`:
    every prefix of the stream a uniform sample, so a sidecar's first epochs are fair while it
    reads the index; file/folder clashes left out here) or ``sorted`` (the parts' files joined in
    key order, a concatenation of gzip members being one gzip stream: the readers find the
    clashes)."""
    if order not in ("shuffled", "sorted"):
        raise ValueError(f"order: shuffled or sorted, not {order!r}")
    stop = threading.Event()  # never set: a throttled request is read again until it answers
    source = source_for(remote, stop=stop)  # a throttled page finding the folders: read again in place
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="epochfs-index-") as tmp:
        sink = IndexSink(tmp)
        show = _progress(sink, started, progress, progress_seconds)
        lister = Lister(sink, source, seed=0, threads=threads, stop=stop, progress_every=2**62,
                        on_page=lambda _: show(), full_pages=True)
        prepared = [lister.prepare()]
        spans = len(prepared[0][1])
        log.info("indexing %s: %d span(s), %d lister thread(s)", redact(remote.url), spans,
                 threads if isinstance(source, PagedSource) else min(threads, spans))

        def run() -> CatalogReport:  # the first run takes the spans found above; a later one resumes
            return lister.run(prepared=prepared.pop() if prepared else None)

        try:
            while_throttled(run, stop=stop, rng=random.Random(), bounds=INDEX_RETRY, log=log,
                            what=f"indexing {redact(remote.url)}")
        finally:
            if progress is not None:
                show(final=True)  # the bar's last frame, its line ended
        total = sink.count
        joined = os.path.join(tmp, "index.jsonl" if plain else "index.jsonl.gz")
        pack = (lambda b: b) if plain else gzip.compress
        parts = sink.members()
        shuffled = order == "shuffled"
        with open(joined, "wb") as out_file:
            header = {"epochfs_index": FORMAT_VERSION, "remote": redact(remote.url),
                      "sorted": bool(source.sorted_listing) and not shuffled, "order": order,
                      "created": int(time.time())}
            out_file.write(pack(json.dumps(header).encode() + b"\n"))
            if shuffled:
                total, dropped = write_shuffled(parts, total, out_file, pack, tmp)
                if dropped:
                    log.warning("indexing: %d file(s) that are also folders of other keys left "
                                "out (the folder wins, as in a listing)", dropped)
            else:
                for path in parts:
                    with gzip.open(path, "rb") if plain else open(path, "rb") as part:
                        while block := part.read(BLOCK):
                            out_file.write(block)
            out_file.write(pack(json.dumps({"end": True, "count": total}).encode() + b"\n"))
        _upload(joined, out, endpoint_url=endpoint_url)
    log.info("indexed %d key(s) of %s in %.1fs into %s", total, redact(remote.url),
             time.monotonic() - started, redact(out))
    if not total:  # every node's sidecar would sample nothing from it: say so where it is made
        log.warning("0 keys under %s: the index is empty; %s", redact(remote.url),
                    prefix_fix(redact(remote.url), index=True))
    return total


def _progress(sink: IndexSink, started: float, progress: Progress | None,
              every: float) -> Callable[..., None]:
    """What the listers call after each page: the bar's next frame on a terminal, else a log line
    every ``every`` seconds (the keys written, the spans every part of which is listed)."""
    lock = threading.Lock()
    last_log = [started]

    def show(final: bool = False) -> None:
        with lock:  # the listers call it at once: one report at a time, each with the latest counts
            now = time.monotonic()
            keys, (done, spans) = sink.count, sink.spans()
            rate = keys / max(now - started, 1e-9)
            if progress is not None and (final or progress.tty):
                detail = f"{keys:,} keys ({rate:,.0f}/s)"
                if final:  # nothing off a terminal (the log's "indexed" line follows)
                    progress.close(done, spans, detail)
                else:
                    progress.update(done, spans, detail)
            elif now - last_log[0] >= every:
                last_log[0] = now
                log.info("indexing: %d key(s) so far (%.0f/s), %d of %d span(s) done", keys, rate,
                         done, spans)

    return show


def _upload(path: str, out: str, *, endpoint_url: str | None) -> None:
    objects.upload(path, out, endpoint_url=endpoint_url)


__all__ = ["FORMAT_VERSION", "IndexSource", "is_index", "listing_source", "object_record", "open_stream",
           "write_index"]
