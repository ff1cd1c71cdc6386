"""A sample the remote lost keeps its entry, and reading it is an I/O error (issue 20).

A sample whose object file is damaged is taken out and fetched again into its place; when the
remote no longer lists its key it cannot be, and it is marked lost. Before, its entry stayed a
symlink to the absent object file: an open answered ENOENT (a reader takes that for "no such
file", and the torch client retried it for 30 s as if the mount were restarting). Now, through a
real FUSE mount (both libfuse APIs), while a reader verifies every byte of every other file over
and over: the listing of ``epoch-0`` and ``epoch-1`` never changes, the lost entry is a regular
file of its size whose open answers EIO, the manifests are byte for byte the ones cut,
``epochfs_fuse_lost_reads_total`` counts each open, the log names the entry (rate-limited), and
``EpochDataset`` raises ``SampleLostError`` (errno EIO) at once instead of retrying."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import pytest
from common import wait_until
from fuse_helpers import admit, errno_of, files_under, make_objects, mounted, open_store, sid_of
from integrity_helpers import damage, objects_of, sampling
from lost_helpers import Reader, make_lost, names, process_counter, store_gauge

from epochfs.sidecar import metrics
from epochfs.sidecar.remote.testing import MemoryRemote
from epochfs.sidecar.store import object_name

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                       reason="needs root and /dev/fuse"),
]


def lost_reads(mpdir: Path) -> float:
    return sum(process_counter(mpdir, "epochfs_fuse_lost_reads_total", {"op": op})
               for op in ("open", "readlink"))


@pytest.mark.parametrize("api", ["lowlevel", "highlevel"])
def test_a_lost_sample_keeps_its_entry_and_answers_eio_while_readers_verify_every_byte(
        tmp_path: Path, api: str) -> None:
    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    mpdir = metrics.prepare_multiproc_dir(tmp_path / "metrics")
    store = open_store(cache, keep_epochs=2)
    objects = make_objects(30, 1500, seed=7)
    admit(store, objects)
    assert store.cut(0) == 0 and store.cut(1) == 1
    lost = sorted(objects)[11]
    env = {"PROMETHEUS_MULTIPROC_DIR": str(mpdir)}
    with mounted(cache, mnt, args=("--fuse-api", api), env=env) as m:
        manifests = {n: (mnt / ".epochfs" / f"epoch-{n}.manifest").read_bytes() for n in (0, 1)}
        reader = Reader([mnt / "epoch-0", mnt / "epoch-1"], objects, lost, listed=[mnt / "epoch-0"])
        reader.start()
        try:
            wait_until(lambda: reader.passes >= 2, what="the reader's first passes (kernel caches filled)")
            make_lost(store, lost)
            entry = mnt / "epoch-1" / lost
            # The kernel held the entry as a symlink: the server drops it from its caches (ENOENT
            # meanwhile, from the link root) and the entry turns into a file that answers EIO.
            # (Without the invalidation, an entry never listed again answers ENOENT until its
            # entry timeout, 200 s here.)
            wait_until(lambda: errno_of(entry.read_bytes) == errno.EIO, timeout=20,
                       what="the lost entry answering EIO")
            passes = reader.passes
            wait_until(lambda: reader.passes >= passes + 3, timeout=60, what="three more reader passes")
        finally:
            reader.stop.set()
            reader.join(timeout=60)
        assert not reader.problems, reader.problems[:5]
        assert errno.EIO in reader.lost_errnos

        for n in (0, 1):
            epoch = mnt / f"epoch-{n}"
            assert names(epoch) == set(objects), "the epoch's listing never changes"
            assert sorted(os.listdir(epoch / "train")) == sorted(k.split("/")[1] for k in objects)
            st = os.lstat(epoch / lost)
            assert st.st_mode & 0o170000 == 0o100000 and st.st_size == len(objects[lost])
            assert errno_of(lambda e=epoch: os.close(os.open(e / lost, os.O_RDONLY))) == errno.EIO
            for key, body in objects.items():
                if key != lost:
                    assert (epoch / key).read_bytes() == body
            assert (mnt / ".epochfs" / f"epoch-{n}.manifest").read_bytes() == manifests[n], \
                "the manifest of an epoch number never changes"
            assert lost in manifests[n].decode()

        # Each open reaches the server and is counted; the log is rate-limited.
        before = lost_reads(mpdir)
        for _ in range(25):
            assert errno_of((mnt / "epoch-1" / lost).read_bytes) == errno.EIO
        assert lost_reads(mpdir) - before == 25
        log = m.log_text()
        named = [line for line in log.splitlines() if f"/{lost}: its sample was lost from the remote" in line]
        assert 1 <= len(named) <= 10, len(named)
        assert "1 sample(s) lost from the remote" in log
        assert "Traceback" not in log
        assert store_gauge(store, "epochfs_samples_lost") == 1

        # The torch client: a clear error at once, not 30 s of retries of an ENOENT.
        from epochfs.torchclient import EpochDataset, SampleLostError

        ds = EpochDataset(mnt, 0, decode="bytes", progress=None)
        index = [str(p) for p in map(ds.path, range(len(ds)))].index(str(mnt / "epoch-0" / lost))
        started = time.monotonic()
        with pytest.raises(SampleLostError) as raised:
            ds[index]
        assert time.monotonic() - started < 5
        assert raised.value.errno == errno.EIO and lost in str(raised.value)
        assert "lost from the remote" in str(raised.value)
        other = (index + 1) % len(ds)
        assert ds[other].numpy().tobytes() == objects[str(ds.path(other).relative_to(mnt / "epoch-0"))]
        ds.release()
    store.close()


def test_the_scrub_and_the_sampler_mark_a_sample_lost_when_the_remote_changed_its_bytes(
        tmp_path: Path) -> None:
    """The whole pipeline, no store call by hand: the in-process sampler with its background
    scrub over a remote whose object now holds other bytes. The scrub finds the cached copy
    damaged and hands the key over, the re-fetch brings the other bytes, the repair refuses them
    and marks the sample lost; through the real mount, ``epoch-0`` keeps every entry, the lost
    one answers EIO, every other reads its bytes and the manifest is the one cut."""
    objects = objects_of(30)
    remote = MemoryRemote(objects)
    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    with sampling(cache, remote, "--scrub-rate", "50M", "--min-samples", "30") as (store, _):
        wait_until(lambda: store.stats().samples == 30, what="every object admitted")
        assert store.cut(0) == 0
        with mounted(cache, mnt) as m:
            epoch = mnt / "epoch-0"
            assert files_under(epoch) == objects
            manifest = (mnt / ".epochfs" / "epoch-0.manifest").read_bytes()
            lost = sorted(objects)[17]
            remote.objects[lost] = bytes(reversed(objects[lost]))  # other bytes under the key
            damage(cache / "objects" / object_name(sid_of(lost)), "flip")
            wait_until(lambda: store.stats().lost == 1, timeout=60, what="the sample marked lost")
            wait_until(lambda: errno_of((epoch / lost).read_bytes) == errno.EIO, timeout=20,
                       what="the lost entry answering EIO")
            assert names(epoch) == set(objects)
            for key, body in objects.items():
                if key != lost:
                    assert (epoch / key).read_bytes() == body
            assert (mnt / ".epochfs" / "epoch-0.manifest").read_bytes() == manifest
            stats = store.stats()
            assert (stats.corrupt_objects_total, stats.repaired_total, stats.repairing) == (1, 0, 1)
            assert remote.opens[lost] == 2, "fetched once more, for the repair it could not be"
            assert "Traceback" not in m.log_text()
