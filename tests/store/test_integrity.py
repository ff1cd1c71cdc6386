"""Integrity (issue 11, item 5): what verifies a download, the background scrub, a damaged or
missing index, and epoch numbers that are never published twice.

Real files, real SQLite, the sampler in-process over sidecar/remote/testing.py where the remote's
behaviour is the point, and the real ``epochfs sample`` (against moto through the fault proxy, or a
``file://`` folder) where the process's start-up and its log are."""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import shutil
import signal
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from common import S3Server, random_objects, wait_until
from digest_helpers import digest_of
from faultproxy import FaultProxy
from integrity_helpers import damage, objects_of, sampling
from sampler_helpers import index_rows, running_sampler, s3_env, start_sampler, verify_cache
from store_helpers import sid_of

from epochfs.sidecar.metrics import StoreCollector
from epochfs.sidecar.remote import RemoteObject
from epochfs.sidecar.remote.testing import MemoryReader, MemoryRemote
from epochfs.sidecar.store import (
    HWM_NAME,
    INDEX_NAME,
    Admission,
    CatalogRow,
    Policy,
    Store,
    memberfiles,
    object_name,
    objectscan,
)

PART = 4096






def samples(cache: Path) -> dict[str, tuple[str, str, str]]:
    """key -> (checksum, digest, verified) of every sample."""
    return {str(k): (str(c), str(d), str(v)) for k, c, d, v in
            index_rows(cache, "SELECT key, checksum, digest, verified FROM samples")}




def _holds(store: Store, key: str, body: bytes) -> bool:
    """Whether ``key``'s object file holds ``body`` (False while it is missing or being replaced)."""
    try:
        return (store.objects_dir / object_name(sid_of(key))).read_bytes() == body
    except FileNotFoundError:
        return False


# ---------------------------------------------------------------------------- the background scrub
def test_the_background_scrub_evicts_damaged_objects_counts_them_and_fetches_them_again(
        tmp_path: Path) -> None:
    objects = objects_of(12)
    remote = MemoryRemote(objects)
    flipped, truncated = sorted(objects)[3], sorted(objects)[7]
    cache = tmp_path / "cache"
    with sampling(cache, remote, "--scrub-rate", "64Mi") as (store, sampler):
        wait_until(lambda: store.stats().samples == 12, what="every object admitted")
        damage(store.objects_dir / object_name(sid_of(flipped)), "flip")
        damage(store.objects_dir / object_name(sid_of(truncated)), "truncate")
        wait_until(lambda: store.stats().corrupt_objects_total == 2, timeout=20, what="both found")
        wait_until(lambda: store.stats().samples == 12 and remote.opens.get(truncated) == 2
                   and remote.opens.get(flipped) == 2, timeout=20, what="both fetched again")
        # A second open is the repair's download under way, not its install: wait for the bytes.
        wait_until(lambda: all(_holds(store, key, objects[key]) for key in (flipped, truncated)),
                   timeout=60, what="both repaired in place")
        assert sampler.scrubber is not None and sampler.scrubber.damaged == 2
    with Store(cache) as store:
        for key, body in objects.items():
            assert (store.objects_dir / object_name(sid_of(key))).read_bytes() == body, key
        assert store.stats().corrupt_objects_total == 2, "the count is the store's: it survives restarts"
    assert {k: n for k, n in remote.opens.items() if n != 1} == {flipped: 2, truncated: 2}


def test_the_background_scrub_counts_a_deleted_object_file_and_repairs_it_in_place(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """An object file deleted behind the running store's back (by hand, a stray clean-up) is
    taken out as a damaged one is: counted in ``epochfs_corrupt_objects_total``, one WARNING line
    naming it "missing", the scrub's own count, marked for repair in place and fetched again
    into its place. The live epoch that lists it keeps the entry: same name, same manifest line,
    and the right bytes again after the repair."""
    objects = objects_of(12)
    remote = MemoryRemote(objects)
    gone = sorted(objects)[4]
    cache = tmp_path / "cache"
    caplog.set_level(logging.INFO, logger="epochfs")
    with sampling(cache, remote, "--scrub-rate", "64Mi", "--min-samples", "12") as (store, sampler):
        wait_until(lambda: store.stats().samples == 12, what="every object admitted")
        assert store.cut(0) == 0
        cut_with = store.epoch_files(0)
        os.unlink(store.objects_dir / object_name(sid_of(gone)))
        wait_until(lambda: store.stats().repaired_total == 1, timeout=20, what="found and fetched again")
        stats = store.stats()
        assert (stats.corrupt_objects_total, stats.repairing, stats.samples) == (1, 0, 12)
        assert sampler.scrubber is not None and sampler.scrubber.damaged == 1
        assert store.epoch_files(0) == cut_with, "epoch 0 keeps the entry and its manifest line"
        assert (store.objects_dir / object_name(sid_of(gone))).read_bytes() == objects[gone]
        exported = {s.name: s.value for family in StoreCollector(stats=store.stats).collect()
                    for s in family.samples}
        assert exported["epochfs_corrupt_objects_total"] == 1
        assert exported["epochfs_repaired_samples_total"] == 1
    found = [r.getMessage() for r in caplog.records if r.name == "epochfs.scrub" and gone in r.getMessage()]
    assert len(found) == 1 and r"is damaged (missing): fetched again into its place" in found[0], found
    assert remote.opens[gone] == 2


def test_scrub_rate_zero_starts_no_scrub(tmp_path: Path) -> None:
    with sampling(tmp_path / "cache", MemoryRemote(objects_of(2)), "--scrub-rate", "0") as (store, sampler):
        wait_until(lambda: store.stats().samples == 2, what="admitted")
        assert sampler.scrubber is None


# ---------------------------------------------------------------------------- what verifies a body
class MultipartRemote(MemoryRemote):
    """Objects uploaded in parts of ``PART`` bytes: multipart ETags, and part sizes on request
    (as S3's HeadObject with PartNumber answers)."""

    def etag(self, body: bytes) -> str:
        parts = [body[i:i + PART] for i in range(0, len(body), PART)]
        return hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest() + f"-{len(parts)}"

    def list(self) -> Iterator[RemoteObject]:
        for key in sorted(self.objects):
            yield RemoteObject(key, len(self.objects[key]), self.etag(self.objects[key]))

    def open(self, key: str, *, checksum: bool = False) -> MemoryReader:
        reader = super().open(key, checksum=checksum)
        reader.etag = self.etag(self.objects[key])
        return reader

    def part_size(self, key: str, part: int) -> int:
        size = len(self.objects[key])
        return min(PART, size - (part - 1) * PART)


class OpaqueRemote(MemoryRemote):
    """ETags that are not content hashes (KMS-encrypted S3, most HTTP servers); with ``crc32``,
    a stored full-object CRC32 sent with each body (S3's x-amz-checksum-crc32)."""

    def __init__(self, objects: dict[str, bytes], *, crc32: bool) -> None:
        super().__init__(objects)
        self.crc32 = crc32

    def list(self) -> Iterator[RemoteObject]:
        for key in sorted(self.objects):
            yield RemoteObject(key, len(self.objects[key]), "opaque-v1")

    def open(self, key: str, *, checksum: bool = False) -> MemoryReader:
        reader = super().open(key, checksum=checksum)
        reader.etag = "opaque-v1"
        if self.crc32:
            crc = zlib.crc32(self.objects[key]).to_bytes(4, "big")
            reader.checksum = ("crc32", base64.b64encode(crc).decode())  # type: ignore[attr-defined]
        return reader


def test_a_multipart_object_damaged_in_transit_is_fetched_again_never_admitted(tmp_path: Path) -> None:
    objects = objects_of(4, 3 * PART + 100)
    remote = MultipartRemote(objects)
    damaged = sorted(objects)[1]
    remote.damage(damaged, "corrupt")
    with sampling(tmp_path / "cache", remote, "--retries", "3") as (store, _):
        wait_until(lambda: store.stats().samples == 4, what="every object admitted")
    got = samples(tmp_path / "cache")
    for key, body in objects.items():
        # The parts' md5s vouch for the bytes; the digest computed while streaming is the
        # cheapest (no md5 of the whole body): it is what the manifest shows and the scrub checks.
        local = digest_of("crc64nvme", body)
        assert got[key] == (local, local, "etag-multipart"), key
    assert remote.opens[damaged] == 2, "the flipped byte was caught by the parts' md5s and fetched again"
    assert verify_cache(tmp_path / "cache", objects) == 4


def test_a_stored_full_object_checksum_verifies_and_without_one_the_record_says_size_only(
        tmp_path: Path) -> None:
    objects = objects_of(3)
    damaged = sorted(objects)[0]
    remote = OpaqueRemote(objects, crc32=True)
    remote.damage(damaged, "corrupt")
    with sampling(tmp_path / "crc", remote) as (store, _):
        wait_until(lambda: store.stats().samples == 3, what="admitted")
    assert remote.opens[damaged] == 2, "the CRC32 caught the flipped byte"
    assert {v for _, _, v in samples(tmp_path / "crc").values()} == {"crc32"}
    assert {(c, d) for c, d, _ in samples(tmp_path / "crc").values()} == {
        (digest_of("crc32", b), digest_of("crc32", b)) for b in objects.values()}, \
        "the stored CRC32 is the checksum shown and the scrub's digest: no md5 computed"

    plain = OpaqueRemote(objects, crc32=False)
    with sampling(tmp_path / "plain", plain) as (store, _):
        wait_until(lambda: store.stats().samples == 3, what="admitted")
        store.cut(0)
        entries = store.epoch_files(0)
    assert {e.checksum for e in entries} == {"size-only"}, "the manifest vouches for nothing unverified"
    assert {d for _, d, _ in samples(tmp_path / "plain").values()} == {
        digest_of("crc64nvme", b) for b in objects.values()}, "a digest is kept for the scrub"


@pytest.fixture
def proxy(s3: S3Server) -> Iterator[FaultProxy]:
    with FaultProxy(upstream=s3.endpoint) as p:
        yield p


def test_epochfs_sample_refuses_a_multipart_body_flipped_in_transit(
        s3: S3Server, proxy: FaultProxy, tmp_path: Path) -> None:
    """The real command against moto: a multipart upload (ETag ``...-2``, a composite CRC32 that
    cannot vouch for the whole body) whose first GET comes through the fault proxy with a byte
    flipped is fetched again and recorded with the digest of the right bytes, checked against the
    parts' md5s. The small objects are verified by the CRC32 S3 stored at their upload."""
    client = s3.client()
    client.create_bucket(Bucket="bkt")
    body = os.urandom(5 * 1024 * 1024 + 3000)
    upload = client.create_multipart_upload(Bucket="bkt", Key="big/a.bin")
    parts = []
    for number, chunk in enumerate((body[:5 * 1024 * 1024], body[5 * 1024 * 1024:]), start=1):
        r = client.upload_part(Bucket="bkt", Key="big/a.bin", UploadId=upload["UploadId"],
                               PartNumber=number, Body=chunk)
        parts.append({"ETag": r["ETag"], "PartNumber": number})
    client.complete_multipart_upload(Bucket="bkt", Key="big/a.bin", UploadId=upload["UploadId"],
                                     MultipartUpload={"Parts": parts})
    small = random_objects(3, 2000, prefix="big/s")
    for key, data in small.items():
        client.put_object(Bucket="bkt", Key=key, Body=data)
    proxy.set_plan("/bkt/big/a.bin", ["corrupt"])
    cache = tmp_path / "cache"
    with running_sampler(cache, "s3://bkt/big", "--endpoint-url", proxy.endpoint, "--capacity", "64Mi",
                         env=s3_env(s3.endpoint)) as sp:
        wait_until(lambda: sp.stats()["samples"] == 4, what="every object admitted")
    assert proxy.injected["corrupt"] == 1 and proxy.gets["/bkt/big/a.bin"] == 2
    local = digest_of("crc64nvme", body)
    got = samples(cache)
    assert got["a.bin"] == (local, local, "etag-multipart")
    assert {v for k, (_, _, v) in got.items() if k != "a.bin"} == {"crc32"}
    verify_cache(cache, {"a.bin": body} | {k[len("big/"):]: v for k, v in small.items()})


# ---------------------------------------------------------------------------- a damaged index
def write_dataset(root: Path, objects: dict[str, bytes]) -> None:
    for key, body in objects.items():
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(body)


def test_a_garbage_page_in_the_index_is_one_log_line_and_the_sampler_samples_again(tmp_path: Path) -> None:
    data, cache = tmp_path / "data", tmp_path / "cache"
    objects = random_objects(40, 3000)
    write_dataset(data, objects)
    with running_sampler(cache, data.as_uri(), "--capacity", "10Mi") as sp:
        wait_until(lambda: sp.stats()["samples"] == 40, what="every file fetched")
    index = cache / INDEX_NAME
    assert not Path(f"{index}-wal").exists(), "a clean stop leaves everything in the index file"
    size = index.stat().st_size
    with open(index, "r+b") as f:  # two pages of garbage in the middle of the file
        f.seek((size // 4096 // 2) * 4096)
        f.write(os.urandom(8192))
    with running_sampler(cache, data.as_uri(), "--capacity", "10Mi") as sp:
        wait_until(lambda: sp.stats()["samples"] == 40, what="every file fetched again")
    text = sp.log_text()  # both runs: the first one had nothing to say about the index
    damaged_lines = [line for line in text.splitlines() if "is damaged" in line]
    assert len(damaged_lines) == 1, text[-3000:]
    assert "moved aside to index.sqlite.corrupt-" in damaged_lines[0]
    assert "Traceback" not in text and text.count(" recovery: ") == 2, "one start each, no crash"
    assert any(p.is_file() for p in cache.glob("index.sqlite.corrupt-*")), "the old index is kept"
    verify_cache(cache, objects)


def test_a_file_that_is_not_a_database_is_replaced_when_a_writer_opens_it(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cache = tmp_path / "cache"
    Store(cache, create=True).close()
    (cache / INDEX_NAME).write_bytes(b"not a database" * 400)
    caplog.set_level(logging.ERROR, logger="epochfs.store")
    with Store(cache, create=True) as store:
        assert store.stats().samples == 0
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "is damaged" in lines[0] and "moved aside" in lines[0], lines
    aside = list(cache.glob("index.sqlite.corrupt-*"))
    kept = [p.read_bytes()[:14] for p in aside if not p.name.endswith(("-wal", "-shm"))]
    assert kept == [b"not a database"]


# ---------------------------------------------------------------------------- epoch numbers
def admit(store: Store, key: str, body: bytes) -> None:
    temp = store.temp_path()
    temp.write_bytes(body)
    md5 = hashlib.md5(body).hexdigest()
    store.admit([Admission(key, sid_of(key), len(body), f"md5:{md5}", md5, temp)])


def contents(store: Store) -> dict[int, list[str]]:
    return {e.epoch: [f.path for f in store.epoch_files(e.epoch)] for e in store.epochs()}


def test_a_rolled_back_index_never_cuts_a_published_number_again(tmp_path: Path) -> None:
    """The index loses its newest transactions (a deleted write-ahead log, a restored copy): the
    epochs it forgot keep their numbers; the next cut is above all of them."""
    cache = tmp_path / "cache"
    published: dict[int, list[str]] = {}
    with Store(cache, create=True) as store:
        store.configure(Policy(capacity=10**6, keep_epochs=10, headroom=0.0))
        admit(store, "a", b"a" * 10)
        store.cut(0)
        store.cut(1)
        store._ix.checkpoint()  # the state the index falls back to
        shutil.copy(cache / INDEX_NAME, tmp_path / "old.sqlite")
        for i in range(2, 6):
            admit(store, f"k{i}", bytes([i]) * 10)
            assert store.cut() == i
        published = contents(store)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{cache / INDEX_NAME}{suffix}").unlink(missing_ok=True)
    shutil.copy(tmp_path / "old.sqlite", cache / INDEX_NAME)
    assert (cache / HWM_NAME).read_text().split() == ["5", "5"]
    with Store(cache, create=True) as store:
        assert [e.epoch for e in store.epochs()] == [0, 1], "the index lost epochs 2-5"
        assert store.request_cut(2) is False, "a lookup may not cut a number it lost"
        with pytest.raises(ValueError, match="high-water mark 5"):
            store.cut(3)
        assert store.next_epoch() == 6
        admit(store, "new", b"n" * 10)
        assert store.request_cut(6) is True
        again = contents(store)
    for n, files in again.items():
        assert published.get(n, files) == files, f"epoch {n} published twice with other content"


def test_a_cut_that_never_committed_leaves_its_number_free(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with Store(cache, create=True) as store:
        store.configure(Policy(capacity=10**6, headroom=0.0))
        admit(store, "a", b"a")
        assert store.cut() == 0
    (cache / HWM_NAME).write_text("0 1\n")  # a crash between raising "cutting" and the commit
    with Store(cache) as store:
        assert store.next_epoch() == 1 and store.request_cut(1) is True


def test_a_reset_index_continues_above_the_high_water_mark(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with Store(cache, create=True) as store:
        store.configure(Policy(capacity=10**6, headroom=0.0))
        admit(store, "a", b"a")
        for n in range(4):
            store.cut(n)
        # The epochs the reset cannot restore: their members files gone too (cut writes them).
        shutil.rmtree(memberfiles.folder(cache))
        store._handle.reset("a test")
        store.configure(Policy(capacity=10**6, headroom=0.0))
        assert store.epochs() == [] and store.next_epoch() == 4
        admit(store, "b", b"b")
        assert store.cut_ready(0) is False and store.request_cut(4) is True


# ---------------------------------------------------------------------------- a deleted write-ahead log
def test_a_write_ahead_log_deleted_under_the_sampler_is_saved_and_numbers_never_reused(
        tmp_path: Path) -> None:
    """The log is deleted under a running sampler while another process (here the test, as the
    FUSE server would) cuts epochs: the sampler saves the deleted log in one log line, new openers
    work again, and after kill -9 and a restart no epoch number comes back with other content."""
    data, cache = tmp_path / "data", tmp_path / "cache"
    objects = random_objects(20, 2000)
    write_dataset(data, objects)
    args = ("--capacity", "10Mi", "--keep-epochs", "100")
    seen: dict[int, list[str]] = {}

    def cut_and_record() -> int:
        with Store(cache) as store:
            n = store.cut(force=True)
            for m, files in contents(store).items():
                assert seen.setdefault(m, files) == files, f"epoch {m} changed"
            assert n is not None
            return n

    sp = start_sampler(cache, data.as_uri(), *args)
    try:
        wait_until(lambda: sp.stats()["samples"] == 20, what="every file fetched")
        for _ in range(3):
            cut_and_record()
        os.unlink(f"{cache / INDEX_NAME}-wal")
        # A new opener works again (it failed with "disk I/O error" for as long as the log was
        # gone), and sees every epoch cut before the deletion.
        assert cut_and_record() == 3 and sorted(seen) == [0, 1, 2, 3]
        wait_until(lambda: "write-ahead log deleted" in sp.log_text(), what="the sampler's log line")
        assert sum("write-ahead log deleted" in line for line in sp.log_text().splitlines()) == 1
        cut_and_record()
        sp.proc.send_signal(signal.SIGKILL)
        sp.proc.wait()
        with Store(cache) as store:
            assert [e.epoch for e in store.epochs()] == [0, 1, 2, 3, 4], "nothing committed was lost"
        sp = start_sampler(cache, data.as_uri(), *args)
        assert cut_and_record() == 5
    finally:
        sp.stop()
    with Store(cache) as store:
        for n, files in contents(store).items():
            assert seen.get(n, files) == files, f"epoch {n} published twice with other content"


# ---------------------------------------------------------------------------- the object scan
def test_the_object_scan_counts_deleted_files_as_damaged_and_says_which_cannot_come_back(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The background object scan (sizes only) takes out a deleted object file as the scrubs take
    out a corrupt one: its report, ``corrupt_objects_total``, the repair mark, one WARNING line
    each; the line says "fetched again" only for a key the remote still lists (it said so for
    every one: a lost sample was announced as coming back)."""
    with Store(tmp_path / "cache", create=True) as store:
        store.configure(Policy(capacity=10**6, headroom=0.0))
        for key in ("listed", "gone"):
            admit(store, key, key.encode() * 100)
        store.add_catalog([CatalogRow("listed", sid_of("listed"), 600, "v1", 0)])
        assert store.cut(0) == 0
        before = store.epoch_files(0)
        for key in ("listed", "gone"):
            os.unlink(store.objects_dir / object_name(sid_of(key)))
        caplog.set_level(logging.INFO, logger="epochfs.store")
        report = objectscan.scan(lambda: store._ix, store.files, threading.Event(), duty=1.0)
        assert report is not None and (report.samples, report.lost, report.orphans) == (2, 2, 0)
        stats = store.stats()
        assert (stats.samples, stats.corrupt_objects_total, stats.repairing) == (2, 2, 2)
        assert [c.key for c in store.repairs_due()] == ["listed"]
        assert store.epoch_files(0) == before, "epoch 0 keeps both entries"
    lines = {key: [r.getMessage() for r in caplog.records if f"of {key} (" in r.getMessage()]
             for key in ("listed", "gone")}
    assert len(lines["listed"]) == 1 and "is missing: fetched again into its place" in lines["listed"][0]
    assert len(lines["gone"]) == 1 and "is missing: its key is no longer listed" in lines["gone"][0]


def test_the_object_scan_removes_a_damaged_file_a_crashed_take_out_left_for_a_lost_sample(
        tmp_path: Path) -> None:
    """``epochfs verify`` killed between the commit that marks a sample for repair and the move of
    its file leaves the damaged file in place while the sampler runs on; for a sample whose key the
    remote no longer lists nothing ever replaces it, so every entry linking to it served the
    damaged bytes until the sampler's next start. The object scan removes it."""
    with Store(tmp_path / "cache", create=True) as store:
        store.configure(Policy(capacity=10**6, headroom=0.0))
        admit(store, "gone", b"g" * 600)
        assert store.cut(0) == 0
        path = store.objects_dir / object_name(sid_of("gone"))
        [obj] = store.stored_objects(after_id=0, limit=10)
        damage(path, "flip")
        damaged = path.read_bytes()
        [taken] = store.take_out([(obj, store.check_object(obj) or "")], quarantine=False)
        assert taken.refetch is None and not path.exists()
        path.write_bytes(damaged)  # what the crash between the commit and the unlink left
        report = objectscan.scan(lambda: store._ix, store.files, threading.Event(), duty=1.0)
        assert report is not None and (report.lost, report.stale) == (0, 1)
        assert not path.exists(), "no reader gets the damaged bytes"
        assert [f.path for f in store.epoch_files(0)] == ["gone"] and store.stats().repairing == 1


def test_two_finders_of_one_damage_count_it_once_and_a_stale_finding_spares_the_repair(
        tmp_path: Path) -> None:
    """The scrub and ``epochfs verify`` each read a batch, then check it: both can find the same
    damaged file. Found by the soak: ``corrupt_objects_total`` counted one damage twice, and the
    second take-out could remove the repaired file the first one's repair had just installed."""
    with Store(tmp_path / "cache", create=True) as store:
        store.configure(Policy(capacity=10**6, headroom=0.0))
        admit(store, "a", b"a" * 600)
        assert store.cut(0) == 0
        path = store.objects_dir / object_name(sid_of("a"))
        good = path.read_bytes()
        [obj] = store.stored_objects(after_id=0, limit=10)
        damage(path, "flip")
        problem = store.check_object(obj) or ""
        assert len(store.take_out([(obj, problem)], quarantine=False)) == 1  # the first finder
        assert not path.exists()
        assert store.take_out([(obj, problem)], quarantine=False) == []  # the second: nothing more
        assert store.stats().corrupt_objects_total == 1
        # The repair lands (its bytes installed first, then its row removed, as integrity.repair
        # does); a finder that saw the file missing before that takes nothing out.
        path.write_bytes(good)
        with store._ix.write() as db:
            db.execute("DELETE FROM repairs")
        assert store.take_out([(obj, "missing")], quarantine=False) == []
        assert path.read_bytes() == good and store.stats().repairing == 0
        assert store.stats().corrupt_objects_total == 1
