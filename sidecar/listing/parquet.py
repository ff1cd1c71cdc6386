"""The rows of an S3 Inventory Parquet data file, read a batch at a time through a seekable file.

Parquet keeps its schema and row-group directory in a footer at the end of the file and each column
where the writer put it, so it cannot be read as a stream like CSV: the file is opened for random
access instead (``s3://`` through the S3 remote's ranged reads, one ranged GET per buffered read;
any other URL through fsspec, whose files seek: :mod:`epochfs.sidecar.remote.objects`) and pyarrow
reads the footer, then one row group's chunks of the five columns used, in buffered reads of
:data:`BLOCK`, handing out :data:`PAGE` rows at a time. Memory is bounded by one row group's
reading state, whatever the size of the file (docs/listing.md has the numbers); nothing is spooled
to disk.

Column names are Amazon's for Parquet and ORC: ``key`` (not URL-encoded, unlike CSV), ``size``,
``e_tag``, and for an inventory of all versions ``is_latest`` and ``is_delete_marker``. pyarrow
is optional (``pip install 'epochfs[parquet]'``): it is imported here only, when a Parquet
inventory is read.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from epochfs.sidecar.listing.sources import PAGE
from epochfs.sidecar.redact import redact
from epochfs.sidecar.remote import BLOCK, RemoteError
from epochfs.sidecar.remote.objects import open_ranged

COLUMNS = ("key", "size", "e_tag", "is_latest", "is_delete_marker")
EXTRA = "pip install 'epochfs[parquet]'"


class Row(NamedTuple):
    """One inventory row: the full key (undecodable bytes surrogate-escaped), its size and ETag,
    and whether it is the object's current version (latest, not a delete marker)."""

    key: str
    size: int
    etag: str
    current: bool
    problem: str = ""
    """Why the row cannot be read ("" when it can; its size is 0 when it cannot): no key, no
    size, or a size that is not a whole number of bytes. A row passed over anyway (an older version, a delete
    marker, which has no size) is not looked into."""


def require_pyarrow(url: str) -> None:
    """Fail at start, naming the extra, rather than at the first data file."""
    try:
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise RemoteError(f"{redact(url)}: a Parquet inventory needs pyarrow, which is not installed "
                          f"here: {EXTRA} (or ask S3 for a CSV inventory)") from None


def parquet_rows(url: str, skip: int, *, endpoint_url: str | None = None) -> Iterator[Row]:
    """The rows of a Parquet data file from row ``skip`` on (row groups before it are not read)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with open_ranged(url, endpoint_url=endpoint_url) as f:
        try:
            pf = pq.ParquetFile(f, buffer_size=BLOCK)
        except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
            raise RemoteError(f"{redact(url)}: not a Parquet file ({e})") from None
        names = set(pf.schema_arrow.names)
        if "key" not in names:
            raise RemoteError(f"{redact(url)}: the inventory has no key column")
        if "size" not in names:  # every object would be refused at its fetch (size 0)
            raise RemoteError(f"{redact(url)}: the inventory has no size column (add Size to the "
                              "inventory's optional fields)")
        columns = [c for c in COLUMNS if c in names]
        meta, first, before = pf.metadata, 0, 0
        while first < meta.num_row_groups and before + meta.row_group(first).num_rows <= skip:
            before += meta.row_group(first).num_rows
            first += 1
        drop = skip - before
        groups = list(range(first, meta.num_row_groups))
        if not groups:
            return
        for batch in pf.iter_batches(batch_size=PAGE, row_groups=groups, columns=columns):
            n = batch.num_rows
            # As bytes whatever the column's annotation: a key that is not UTF-8 stays a key.
            keys = batch.column("key").cast(pa.large_binary()).to_pylist()
            cols = {c: batch.column(c).to_pylist() if c in names else [None] * n for c in COLUMNS[1:]}
            for i in range(drop, n):
                raw = keys[i] or b""
                latest, marker = cols["is_latest"][i], cols["is_delete_marker"][i]
                size, problem = _size(cols["size"][i])
                if keys[i] is None:
                    problem = "no key"
                yield Row(raw.decode("utf-8", "surrogateescape"), size, str(cols["e_tag"][i] or ""),
                          latest is not False and not marker, problem)
            drop = max(0, drop - n)


def _size(value: object) -> tuple[int, str]:
    """A row's size column: (bytes, "") or (0, why it is not a whole number of bytes)."""
    if value is None:
        return 0, "no size"
    if type(value) is not int or value < 0:
        return 0, f"size {value!r} is not a whole number of bytes"
    return value, ""


__all__ = ["EXTRA", "Row", "parquet_rows", "require_pyarrow"]
