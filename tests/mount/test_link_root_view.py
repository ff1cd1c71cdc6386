"""A ``--link-root`` must be a view of the cache's objects folder, or every epoch file is a link to
nothing.

The cache folder itself given for ``EPOCHFS_LINK_ROOT`` (instead of ``<it>/objects``) was accepted:
the sidecar became ready and healthy, every sample was a broken link, and the torch client blamed
retirement. Now ``epochfs mount`` and ``epochfs sidecar`` refuse a link root that is not the
objects folder (the folder itself, or a bind mount of it: same device and inode) and does not show
the cache's marker folder (``objects/.epochfs-cache-<32 hex>``, random per cache), with one line
naming ``--link-root`` and exit 2. A read-only bind of the objects folder passes, on an empty
cache too, and so does the chart's layout, where the link root's ``objects/`` appears only once
the store made it. Real mounts, real processes, moto's S3 server for the sidecar.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from common import S3Server, put_objects, random_objects
from fuse_helpers import admit, files_under, make_objects, mounted, open_store
from sidecar_helpers import running_sidecar

from epochfs.fuse.mounting import find_mount, lazy_unmount, make_readonly_bind
from epochfs.sidecar.store import Store

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE"),
]

MARKER = ".epochfs-cache-"


def marker_names(objects: Path) -> list[str]:
    return sorted(p.name for p in objects.iterdir() if p.name.startswith(MARKER))


@pytest.mark.parametrize("wrong", ["the-cache-folder", "another-cache", "an-empty-folder"])
def test_a_link_root_that_is_not_a_view_of_the_objects_folder_is_refused(tmp_path: Path, wrong: str) -> None:
    cache = tmp_path / "cache"
    store = open_store(cache)
    admit(store, make_objects(3, 100))
    assert store.cut(0) == 0
    store.close()
    if wrong == "the-cache-folder":
        link_root = cache
    elif wrong == "another-cache":
        other = tmp_path / "other"
        with open_store(other) as o:  # the same keys: the same object names, another cache
            admit(o, make_objects(3, 100))
        link_root = other / "objects"
    else:
        link_root = tmp_path / "empty"
        link_root.mkdir()
    with (pytest.raises(RuntimeError, match="did not come up") as refused,
          mounted(cache, tmp_path / "mnt", args=("--link-root", str(link_root)))):
        pass  # mounted: every epoch file would be a link to nothing
    said = str(refused.value)
    assert "(exit 2)" in said, said
    assert (f"epochfs mount: --link-root: {link_root} is not a view of the cache's objects folder "
            f"{cache / 'objects'}") in said, said
    assert find_mount(tmp_path / "mnt") is None


def test_a_read_only_bind_of_an_empty_caches_objects_passes(tmp_path: Path) -> None:
    """An empty cache: no object to compare, the marker (or the bind's own inode) tells."""
    cache, ro = tmp_path / "cache", tmp_path / "ro"
    open_store(cache).close()
    assert make_readonly_bind(cache / "objects", ro)
    try:
        with mounted(cache, tmp_path / "mnt", args=("--link-root", str(ro))) as m:
            assert (m.path / ".epochfs").is_dir()
            store = open_store(cache)
            admit(store, make_objects(2, 64))
            assert store.cut(0) == 0
            store.close()
            assert files_under(m.path / "epoch-0") == make_objects(2, 64)
    finally:
        lazy_unmount(ro, any_kind=True)


def test_the_marker_is_made_once_per_cache_and_tells_a_view_from_another_folder(tmp_path: Path) -> None:
    """A path that is not the objects folder's inode but shows its marker is a view (a file system
    that gives other inode numbers); the marker is one per cache, made again for an older cache."""
    from epochfs.fuse.errors import MountError
    from epochfs.fuse.mounting import check_link_root_view

    cache = tmp_path / "cache"
    Store(cache, create=True).close()
    objects = cache / "objects"
    names = marker_names(objects)
    assert len(names) == 1 and len(names[0]) == len(MARKER) + 32 and not any((objects / names[0]).iterdir())
    Store(cache).close()
    assert marker_names(objects) == names, "a second open made another marker"
    check_link_root_view(objects, objects)
    shows = tmp_path / "shows"
    (shows / names[0]).mkdir(parents=True)
    check_link_root_view(shows, objects)
    for wrong in (cache, tmp_path / "nothing-there"):
        with pytest.raises(MountError, match=f"^--link-root: {wrong} is not a view"):
            check_link_root_view(wrong, objects)
    shutil.rmtree(shows / names[0])  # another cache's marker is another name
    (shows / f"{MARKER}{'0' * 32}").mkdir()
    with pytest.raises(MountError, match=f"its marker {names[0]} is not there"):
        check_link_root_view(shows, objects)
    (objects / names[0]).rmdir()  # a cache made before the marker gets one at its next open
    Store(cache).close()
    assert len(marker_names(objects)) == 1


def test_the_charts_layout_passes_though_its_link_root_appears_only_with_the_store(
        s3: S3Server, tmp_path: Path) -> None:
    """The chart mounts the cache volume read-only a second time and passes ``<it>/objects``,
    which a new volume has only once the store made it: the sidecar checks the link root after
    opening the store, and samples read through the link root are the remote's bytes."""
    objects = random_objects(8, 1024)
    put_objects(s3, "data", objects)
    cache, ro = tmp_path / "cache", tmp_path / "ro"
    cache.mkdir()
    assert make_readonly_bind(cache, ro)
    try:
        assert not (ro / "objects").exists()
        extra = ("--capacity", "16Mi", "--min-samples", "4", "--link-root", str(ro / "objects"))
        with running_sidecar(tmp_path, remote="s3://data", endpoint=s3.endpoint, extra=extra) as car:
            epoch = car.mount / "epoch-0"
            read = files_under(epoch)
            assert read and all(objects[k] == v for k, v in read.items())
            link = os.readlink(next(p for p in epoch.rglob("*") if p.is_symlink()))
            assert link.startswith(f"{ro}/objects/"), link
    finally:
        lazy_unmount(ro, any_kind=True)
