"""An S3 Inventory report as the listing: its ``manifest.json`` and the CSV (or Parquet) data
files it names, read as streams, one span per data file (listed in parallel, no LIST request).

Amazon writes inventories to a destination bucket as ``<source-bucket>/<config-id>/<date>/
manifest.json`` with data files under ``<source-bucket>/<config-id>/data/``; the manifest names
them by key in the destination bucket (``destinationBucket`` is an ARN). For an ``s3://``
manifest the data files are read from that bucket; for any other URL (a copy on a file system or
behind HTTP) the keys are resolved against the URL's root, the manifest's URL less its last four
path components. CSV keys are URL-encoded (as Amazon writes them); keys outside the remote's
prefix are passed over (not counted). Parquet data files are read by :mod:`.parquet` (pyarrow,
the ``parquet`` extra: without it the manifest is refused at start, naming the extra); ORC is
not read. Rows of non-current versions (``IsLatest`` false) and delete markers are passed over,
in every format; a current row under the prefix that cannot be read (no key, no size, a size
that is not a whole number of bytes) is skipped, counted and logged with its row, as an index's
record is (:class:`~.records.Unreadable`). The ``Size`` field is required (a CSV schema without
it is refused at start, a Parquet data file without it when read). A resume point is the rows of
the data file consumed.
"""

from __future__ import annotations

import csv
import io
import json
import posixpath
import re
from collections.abc import Iterator
from urllib.parse import unquote

from epochfs.sidecar.listing.parquet import Row, parquet_rows, require_pyarrow
from epochfs.sidecar.listing.records import MAX_SIZE, Unreadable
from epochfs.sidecar.listing.sources import PAGE
from epochfs.sidecar.listing.span import Page, Span
from epochfs.sidecar.redact import redact
from epochfs.sidecar.remote import RemoteError, RemoteObject
from epochfs.sidecar.remote.objects import open_stream
from epochfs.sidecar.remote.urls import split_url


class InventorySource:
    sorted_listing = False  # data files are not promised to be in key order
    shuffled = False  # nor in a random one: what is read of a data file may be its first keys

    def __init__(self, manifest_url: str, *, remote_url: str, endpoint_url: str | None = None) -> None:
        self.url = manifest_url
        self.name = "inventory:" + redact(manifest_url)
        self.endpoint_url = endpoint_url
        self.unreadable = Unreadable(f"inventory {redact(manifest_url)}")
        remote = split_url(remote_url)  # a prefix's "#" and "?" kept (s3://src/run#1: run#1/)
        root = remote.path.strip("/")
        self.prefix = f"{root}/" if root else ""
        with open_stream(manifest_url, endpoint_url=endpoint_url, what="the index", gunzip=True) as f:
            try:
                manifest = json.loads(f.read())
            except ValueError as e:
                raise RemoteError(f"{redact(manifest_url)}: not an S3 Inventory manifest ({e})") from None
        self.format = str(manifest.get("fileFormat", "")).upper()
        if self.format not in ("CSV", "PARQUET"):
            raise RemoteError(f"{redact(manifest_url)}: inventory format {manifest.get('fileFormat')!r} "
                              "is not read (ask S3 for a CSV or Parquet inventory)")
        self.schema: list[str] = []
        if self.format == "PARQUET":
            require_pyarrow(manifest_url)  # its fileSchema is a Parquet message; columns are read
        else:
            self.schema = [c.strip() for c in str(manifest.get("fileSchema", "")).split(",")]
            if "Key" not in self.schema:
                raise RemoteError(f"{redact(manifest_url)}: the inventory schema has no Key column")
            if "Size" not in self.schema:  # every object would be refused at its fetch (size 0)
                raise RemoteError(f"{redact(manifest_url)}: the inventory schema has no Size column "
                                  "(add Size to the inventory's optional fields)")
        if (remote.scheme == "s3" and manifest.get("sourceBucket")
                and manifest["sourceBucket"] != remote.host):
            raise RemoteError(f"{redact(manifest_url)} is the inventory of bucket "
                              f"{manifest['sourceBucket']!r}, not of {remote.host!r}")
        dest = str(manifest.get("destinationBucket", "")).rsplit(":", 1)[-1]
        at = split_url(manifest_url)
        if at.scheme == "s3":
            base = f"s3://{dest}"
        else:  # the root four folders up: <root>/<source-bucket>/<config-id>/<date>/manifest.json
            base = (f"{at.scheme}://" if at.scheme else "") + posixpath.dirname(posixpath.dirname(
                posixpath.dirname(posixpath.dirname(at.host + at.path))))
        self.files = [f"{base.rstrip('/')}/{f['key']}" for f in manifest.get("files", [])]

    def spans(self) -> list[Span]:
        return [Span(url, "", None) for url in self.files]

    def _rows(self, url: str, skip: int) -> Iterator[Row]:
        """The data file's rows from row ``skip`` on, as :class:`.parquet.Row`."""
        if self.format == "PARQUET":
            yield from parquet_rows(url, skip, endpoint_url=self.endpoint_url)
            return
        with open_stream(url, endpoint_url=self.endpoint_url, what="the index", gunzip=True) as f:
            text = io.TextIOWrapper(f, encoding="utf-8", errors="surrogateescape", newline="")
            for i, values in enumerate(csv.reader(text)):
                if i < skip:
                    continue
                if not values:  # a blank line: no object, passed over (a row for the resume point)
                    yield Row("", 0, "", False)
                    continue
                row = dict(zip(self.schema, values, strict=False))
                if "Key" not in row:
                    yield Row("", 0, "", True, problem="no Key")
                    continue
                # CSV keys are URL-encoded (form encoding: "+" is a space).
                key = unquote(row["Key"].replace("+", " "), errors="surrogateescape")
                current = (row.get("IsDeleteMarker", "").lower() != "true"
                           and row.get("IsLatest", "").lower() != "false")
                size, problem = csv_size(row.get("Size", ""))
                yield Row(key, size, row.get("ETag") or "", current, problem=problem)

    def pages(self, span: Span, after: str) -> Iterator[Page]:
        """The current objects under the remote's prefix from row ``after`` on. A row of those
        (or one without a key) that cannot be read is skipped and counted (:class:`~.records.
        Unreadable`); rows passed over (another prefix, an older version, a delete marker: these
        have no size) are not looked into."""
        consumed = int(after or 0)
        where = f"inventory data file {redact(span.prefix)}"
        skipped = first = in_page = 0
        batch: list[RemoteObject] = []
        for row in self._rows(span.prefix, consumed):
            consumed += 1
            if row.problem and (not row.key or (row.key.startswith(self.prefix) and row.current)):
                skipped += 1
                in_page += 1
                first = first or consumed
                self.unreadable.skip(f"{where} row {consumed}", row.problem)
                continue
            full = row.key
            if not full.startswith(self.prefix) or not row.current:
                continue
            key: str | bytes = full[len(self.prefix):]
            try:
                str(key).encode("utf-8")
            except UnicodeEncodeError:
                key = str(key).encode("utf-8", "surrogateescape")
            batch.append(RemoteObject(key, row.size, row.etag))
            if len(batch) >= PAGE:
                yield Page(batch, str(consumed), False, in_page)
                batch, in_page = [], 0
        if skipped:
            Unreadable.report(where, skipped, f"row {first}")
        yield Page(batch, str(consumed), True, in_page)


def csv_size(text: str) -> tuple[int, str]:
    """A CSV row's Size: (bytes, "") or (0, why it is not a whole number of bytes). Amazon writes
    an integer; one written as an integral decimal (``3.0``, by a tool that read the report as
    floats) is the same size and taken."""
    text = text.strip()
    if not text:
        return 0, "no Size"
    match = _SIZE.fullmatch(text)
    if match is None or int(match[1]) > MAX_SIZE:
        return 0, f"Size {text!r} is not a whole number of bytes"
    return int(match[1]), ""


_SIZE = re.compile(r"([0-9]+)(?:\.0*)?")


__all__ = ["InventorySource"]
