"""An index resumes only in the very lines it committed (r54).

An index without a ``"created"`` header (written by hand), read while incomplete (no trailer
yet: the listing fails, its first pages committed), then written again whole at the same URL in
another order, resumed at its old line count: the lines skipped were other keys, which were never
listed, and status said complete. Its resume point now carries a digest of the lines committed:
other lines there fail the run and the run tried again lists the index afresh; an index that only
grew resumes. A real :class:`~epochfs.sidecar.listing.Lister` reads real files into a real
:class:`~epochfs.sidecar.store.Store`, tried again as the listing thread does after a failure.
"""

from __future__ import annotations

import json
from pathlib import Path

from epochfs.sidecar.listing.indexfile import FORMAT_VERSION, IndexSource, recorded_index
from epochfs.sidecar.listing.lister import Lister
from epochfs.sidecar.remote import RemoteError
from epochfs.sidecar.store import Store

KEYS = [f"k{i:04d}.bin" for i in range(2500)]


def _write(path: Path, keys: list[str], *, trailer: bool, created: int | None = None) -> None:
    header: dict[str, object] = {"epochfs_index": FORMAT_VERSION, "remote": "s3://bkt/p"}
    if created is not None:
        header["created"] = created
    lines = [json.dumps(header)] + [json.dumps({"k": k, "s": 5}) for k in keys]
    if trailer:
        lines.append(json.dumps({"end": True, "count": len(keys)}))
    path.write_text("\n".join(lines) + "\n")


def _runs(lister: Lister, tries: int = 3) -> list[object]:
    """The runs of ``lister`` until one ends (True: complete), each failure's message, as the
    listing thread tries a failed run again."""
    runs: list[object] = []
    for _ in range(tries):
        try:
            runs.append(lister.run().complete)
            return runs
        except RemoteError as e:
            runs.append(str(e))
    return runs


def _catalog(store: Store) -> set[str]:
    return {str(c.key) for _, c in store.candidates(after_rank=None, limit=10**9)}


def _read_incomplete(tmp_path: Path, created: int | None = None) -> tuple[Store, Lister, Path]:
    """A cache whose listing read the index while it had no trailer: 2 pages committed, failed."""
    index = tmp_path / "idx.jsonl"
    _write(index, KEYS, trailer=False, created=created)
    store = Store(tmp_path / "cache", create=True)
    lister = Lister(store, IndexSource(str(index), page=1000), seed=1, threads=1)
    runs = _runs(lister, tries=1)
    assert "truncated" in str(runs), runs
    parts = store.listings().state().parts
    assert parts and not parts[0].done, "the listing is left to resume"
    return store, lister, index


def test_an_index_without_created_rewritten_is_listed_afresh(tmp_path: Path) -> None:
    store, lister, index = _read_incomplete(tmp_path)
    try:
        _write(index, KEYS[::-1], trailer=True)  # written again, whole, in another order
        runs = _runs(lister)
        assert runs[-1] is True, runs
        missing = sorted(set(KEYS) - _catalog(store))
        assert not missing, f"{len(missing)} key(s) missing, first {missing[:3]}; runs: {runs}"
        assert "changed since this listing began" in str(runs[0]), runs
        assert store.listings().state().complete is not None
    finally:
        store.close()


def test_an_index_rewritten_with_the_same_created_is_listed_afresh(tmp_path: Path) -> None:
    """A ``created`` that did not change (the header copied by hand) does not vouch for the lines."""
    store, lister, index = _read_incomplete(tmp_path, created=1767225600)
    try:
        _write(index, KEYS[::-1], trailer=True, created=1767225600)
        runs = _runs(lister)
        assert runs[-1] is True and set(KEYS) <= _catalog(store), runs
    finally:
        store.close()


def test_an_index_that_grew_resumes(tmp_path: Path) -> None:
    """The same lines and more (its writer finished it): resumed after the 2,000 lines committed."""
    store, lister, index = _read_incomplete(tmp_path)
    try:
        _write(index, [*KEYS, "k9999.bin"], trailer=True)
        report = lister.run()
        assert report.complete and report.listed == 501, "resumed, not listed afresh"
        assert _catalog(store) == set(KEYS) | {"k9999.bin"}
    finally:
        store.close()


def test_a_recorded_name_marked_read_again_is_the_same_name(tmp_path: Path) -> None:
    """A listing begun afresh after its index changed is recorded under the name marked so; the
    source made from that record (the index unreadable at a start) has the very same name."""
    store, lister, index = _read_incomplete(tmp_path, created=1767225600)
    try:
        _write(index, KEYS[::-1], trailer=True, created=1767225600)
        assert _runs(lister)[-1] is True
        recorded = store.listings().state().source
        assert recorded is not None and "(read again: " in recorded
        source = recorded_index(str(index), endpoint_url=None, recorded=recorded)
        assert source is not None and source.name == lister.source.name
    finally:
        store.close()


def test_an_index_rewritten_twice_under_a_listing_is_listed_afresh_twice(tmp_path: Path) -> None:
    """The second change marks the name anew, never with the mark it had: the run tried again
    lists afresh instead of resuming, and failing, for ever."""
    store, lister, index = _read_incomplete(tmp_path)
    try:
        _write(index, KEYS[::-1], trailer=False)  # rewritten, still without its trailer
        runs = _runs(lister)
        assert "changed since" in str(runs[0]) and "truncated" in str(runs[-1]), runs
        marked = lister.source.name
        _write(index, KEYS, trailer=True)
        runs = _runs(lister)
        assert runs[-1] is True and "changed since" in str(runs[0]), runs
        assert lister.source.name != marked
        assert _catalog(store) == set(KEYS)
    finally:
        store.close()
