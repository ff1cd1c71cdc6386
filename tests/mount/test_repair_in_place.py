"""A repair keeps the epoch whole (issue 20, item 1). Cut epoch 0, read it through a real FUSE
mount, flip a byte in three of its objects: the scrub finds them and the sampler fetches each
again *into its place*. Before, the scrub dropped their rows and fetched them as new samples:
after the server rebuilt its tree ``os.listdir(epoch-0)`` returned ``[]``, opens failed with
ENOENT, and the same epoch number later had another manifest (200 -> 197 files).

Here, at every look while the repair runs, the epoch lists every file it was cut with; after it,
every file reads its right bytes and the manifest is byte for byte the one cut."""

from __future__ import annotations

import os
from pathlib import Path

from common import wait_until
from fuse_helpers import files_under, mounted
from integrity_helpers import damage, objects_of, sampling
from store_helpers import sid_of

from epochfs.sidecar.remote.testing import MemoryRemote
from epochfs.sidecar.store import Store, object_name


def _names(root: Path) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), root) for d, _, files in os.walk(root) for f in files}


def test_a_scrub_repair_keeps_every_file_of_the_epoch_being_read(tmp_path: Path) -> None:
    objects = objects_of(40)
    remote = MemoryRemote(objects)
    cache = tmp_path / "cache"
    with sampling(cache, remote, "--scrub-rate", "50M", "--min-samples", "40") as (store, _):
        wait_until(lambda: store.stats().samples == 40, what="every object admitted")
        assert store.cut(0) == 0
        with mounted(cache, tmp_path / "mnt") as m:
            epoch = m.path / "epoch-0"
            before = files_under(epoch)
            assert before == objects
            manifest = (m.path / ".epochfs" / "epoch-0.manifest").read_bytes()
            damaged = sorted(objects)[5:8]
            for key in damaged:
                damage(cache / "objects" / object_name(sid_of(key)), "flip")

            looks = 0

            def repaired() -> bool:
                nonlocal looks
                looks += 1
                assert _names(epoch) == set(objects), "the epoch lost files while they were repaired"
                return store.stats().repaired_total == 3

            wait_until(repaired, timeout=60, what="three samples repaired in place")
            assert looks > 1
            assert files_under(epoch) == objects, "every file reads its right bytes"
            assert (m.path / ".epochfs" / "epoch-0.manifest").read_bytes() == manifest
            assert [e.samples for e in store.epochs()] == [40]
            stats = store.stats()
            assert (stats.corrupt_objects_total, stats.repairing, stats.samples) == (3, 0, 40)
            assert all(remote.opens[k] == 2 for k in damaged)
            assert "Traceback" not in m.log_text()


def test_a_verify_quarantine_keeps_the_folder_views_epoch_as_published(tmp_path: Path) -> None:
    """The folder view: ``epochfs verify`` quarantines two damaged objects; the sampler repairs them
    in place, and the published ``epoch-0/`` is the same folder (not republished with fewer
    files), every entry reading its right bytes."""
    import subprocess
    import sys

    from epochfs.sidecar.folderview import FolderPublisher

    objects = objects_of(30)
    remote = MemoryRemote(objects)
    cache = tmp_path / "cache"
    folder = tmp_path / "view"
    with sampling(cache, remote, "--scrub-rate", "0", "--min-samples", "30") as (store, _):
        wait_until(lambda: store.stats().samples == 30, what="every object admitted")
        assert store.cut(0) == 0
        publisher = FolderPublisher(store=store, folder=folder, link_root=store.objects_dir.absolute())
        publisher.recover()
        publisher.step(force_status=True)
        epoch = folder / "epoch-0"
        assert files_under(epoch) == objects
        inode = epoch.stat().st_ino
        for key in sorted(objects)[:2]:
            damage(cache / "objects" / object_name(sid_of(key)), "flip")
        epochfs = str(Path(sys.executable).with_name("epochfs"))
        verify = subprocess.run([epochfs, "verify", "--cache", str(cache)], capture_output=True, text=True,
                                timeout=120)
        assert verify.returncode == 1 and "2 damaged" in verify.stdout, verify.stdout + verify.stderr

        def repaired() -> bool:
            publisher.step()
            assert _names(epoch) == set(objects), "the published epoch lost entries"
            return store.stats().repaired_total == 2

        wait_until(repaired, timeout=60, what="two samples repaired in place")
        assert epoch.stat().st_ino == inode, "epoch-0 was republished"
        assert files_under(epoch) == objects


def test_a_file_deleted_while_stopped_is_fetched_again_into_its_place(tmp_path: Path) -> None:
    """Object files deleted while the sidecar is stopped: the next start's recovery used to drop
    their rows, so the epoch cut before had fewer files after the restart. Now they are marked
    for repair in place: the epoch lists every file it was cut with before the repair lands, and
    after it every file reads its bytes again."""
    objects = objects_of(30)
    remote = MemoryRemote(objects)
    cache = tmp_path / "cache"
    with sampling(cache, remote, "--min-samples", "30") as (store, _):
        wait_until(lambda: store.stats().samples == 30, what="every object admitted")
        assert store.cut(0) == 0
        cut_with = [f.path for f in store.epoch_files(0)]
    gone = sorted(objects)[3:5]
    for key in gone:  # the sidecar is stopped: deleted by hand, or lost with a volume's writes
        os.unlink(cache / "objects" / object_name(sid_of(key)))
    with Store(cache) as stopped:  # the next start: recovery first, then the sampler
        report = stopped.recover()
        assert report.repairs_marked == 2, report
        assert [f.path for f in stopped.epoch_files(0)] == cut_with, "the epoch never changes"
    with sampling(cache, remote, "--min-samples", "30") as (store, _):
        wait_until(lambda: store.stats().repairing == 0, timeout=60, what="both fetched into their place")
        assert [f.path for f in store.epoch_files(0)] == cut_with
        with mounted(cache, tmp_path / "mnt") as m:
            assert files_under(m.path / "epoch-0") == objects
