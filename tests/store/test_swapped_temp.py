"""A download's temp file replaced by another process before its admission is never installed.

The body is hashed through the downloader's own descriptor; what sits at the temp's name when the
batch is admitted may be something else (another process with write access to ``tmp/`` renamed a
link or another file over it). The store installs only the file the download wrote (its device
and inode, recorded while the descriptor was open) and chmods it through its own descriptor: a
link is never followed out of the cache, and bytes nobody verified are never served.

Real downloads (the real :class:`~epochfs.sidecar.download.Downloader` over a ``file://`` remote),
a real store, real links and files.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import threading
from pathlib import Path

import pytest
from store_helpers import sid_of

from epochfs.sidecar.download import Downloader, RetryPolicy
from epochfs.sidecar.remote import open_remote
from epochfs.sidecar.reservations import Reservations
from epochfs.sidecar.store import Admission, Candidate, CatalogRow, Policy, Store, object_name

BODIES = {"train/good.bin": b"GOOD" * 4096, "train/other.bin": b"OTHR" * 4096}


def _downloads(tmp_path: Path, store: Store) -> dict[str, Admission]:
    """Each of :data:`BODIES` fetched by the real downloader into a verified temp file."""
    data = tmp_path / "data"
    (data / "train").mkdir(parents=True)
    for key, body in BODIES.items():
        (data / key).write_bytes(body)
    remote = open_remote(data.as_uri())
    dl = Downloader(store=store, remote=remote, stop=threading.Event(),
                    retry=RetryPolicy(attempts=1, base=0.0, cap=0.0))
    out = {}
    for o in remote.list():
        key = str(o.key)
        result = dl.fetch(Candidate(key, sid_of(key), o.size, o.version))
        assert result.error is None and result.admission is not None, result.error
        out[key] = result.admission
    return out


def _swap(temp: Path, planted: Path) -> None:
    """What the neighbour did: ``planted`` made beside the temp, then renamed over it."""
    os.rename(planted, temp)


def _admit(store: Store, items: list[Admission]) -> None:
    reservations = Reservations(store)
    assert reservations.reserve(sum(a.size for a in items))
    reservations.admit(items)


def test_a_temp_swapped_for_a_link_is_not_installed_and_the_link_is_not_followed(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    secret = tmp_path / "outside" / "secret"
    secret.parent.mkdir()
    secret.write_bytes(b"TOP-SECRET-CONTENT")
    secret.chmod(0o600)
    with Store(tmp_path / "cache", create=True) as store:
        store.configure(Policy(capacity=10**7, headroom=0.0))
        got = _downloads(tmp_path, store)
        bad, good = got["train/good.bin"], got["train/other.bin"]
        link = bad.temp.with_name(bad.temp.name + ".x")
        os.symlink(secret, link)
        _swap(bad.temp, link)
        caplog.set_level(logging.WARNING, logger="epochfs.store")
        _admit(store, [bad, good])
        assert stat.S_IMODE(secret.stat().st_mode) == 0o600, "chmod followed the link out of the cache"
        assert secret.read_bytes() == b"TOP-SECRET-CONTENT"
        target = store.objects_dir / object_name(bad.sid)
        assert not os.path.lexists(target), "the link was installed as the object"
        assert not os.path.lexists(bad.temp), "the swapped temp is removed"
        assert store.cached_among(list(BODIES)) == {"train/other.bin"}, "the rest of the batch is admitted"
        assert (store.objects_dir / object_name(good.sid)).read_bytes() == BODIES["train/other.bin"]
        assert store.stats().samples == 1 and store.cache_bytes() == good.size
    lines = [r.getMessage() for r in caplog.records if "not admitting 'train/good.bin'" in r.getMessage()]
    assert len(lines) == 1 and "symbolic link" in lines[0], lines


def test_a_temp_swapped_for_another_file_of_the_same_size_is_not_installed(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with Store(tmp_path / "cache", create=True) as store:
        store.configure(Policy(capacity=10**7, headroom=0.0))
        got = _downloads(tmp_path, store)
        bad = got["train/good.bin"]
        evil = bad.temp.with_name(bad.temp.name + ".x")
        evil.write_bytes(b"EVIL" * 4096)  # the listed size: only the inode tells it apart
        _swap(bad.temp, evil)
        caplog.set_level(logging.WARNING, logger="epochfs.store")
        _admit(store, [bad])
        assert not os.path.lexists(store.objects_dir / object_name(bad.sid)), "unverified bytes installed"
        assert not os.path.lexists(bad.temp)
        assert store.cached_among(list(BODIES)) == set() and store.cache_bytes() == 0
    lines = [r.getMessage() for r in caplog.records if "not admitting 'train/good.bin'" in r.getMessage()]
    assert len(lines) == 1 and "another file" in lines[0], lines


def test_a_repair_download_swapped_for_another_file_leaves_the_repair_due(tmp_path: Path) -> None:
    """A repair in place installs through the same check: the swapped download is not renamed
    over the sample's file, and the sample still waits for its repair (fetched again)."""
    with Store(tmp_path / "cache", create=True) as store:
        store.configure(Policy(capacity=10**7, headroom=0.0))
        key = "train/good.bin"
        first = _downloads(tmp_path, store)
        _admit(store, [first[key]])
        store.add_catalog([CatalogRow(key, sid_of(key), len(BODIES[key]), first[key].version, 0)])
        path = store.objects_dir / object_name(sid_of(key))
        [obj] = store.stored_objects(after_id=0, limit=10)
        os.unlink(path)
        [taken] = store.take_out([(obj, "missing")], quarantine=False)
        assert taken.refetch is not None and store.awaits_repair(key)
        (tmp_path / "data").rename(tmp_path / "data-1")
        repair = _downloads(tmp_path, store)[key]
        evil = repair.temp.with_name(repair.temp.name + ".x")
        evil.write_bytes(b"EVIL" * 4096)
        _swap(repair.temp, evil)
        store.admit([repair])
        assert not os.path.lexists(path), "the swapped file was renamed over the sample's"
        assert store.awaits_repair(key), "the repair was recorded as done"
        assert [c.key for c in store.repairs_due()] == [key]


def test_the_download_records_the_inode_it_wrote(tmp_path: Path) -> None:
    with Store(tmp_path / "cache", create=True) as store:
        for a in _downloads(tmp_path, store).values():
            st = os.lstat(a.temp)
            assert a.inode == (st.st_dev, st.st_ino)
            assert hashlib.md5(a.temp.read_bytes()).hexdigest() == hashlib.md5(BODIES[a.key]).hexdigest()
