"""Listing ``.epochfs`` builds no epoch's tree again, however many epochs are live.

The listing gives each manifest's size, and the view keeps only three epochs' trees and manifests
built (``TREES_KEPT``). Before, the size came from the manifest itself, so with more live epochs
than that every ``ls .epochfs`` rebuilt every epoch's tree and manifest in turn (a pass over the
store each: 1.3-2.9 s per listing with 5 live epochs of 30k files, 5 ms with 2). An epoch never
changes once cut, so its manifest's size is kept apart, until it retires. Counted, not timed: the
server logs each tree it builds (``epoch N: tree built``, at DEBUG), through a real mount.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fuse_helpers import admit, make_objects, mounted, open_store

from epochfs.fuse.view import TREES_KEPT, View

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                       reason="needs root and /dev/fuse"),
]

LIVE = TREES_KEPT + 2


def _live_epochs(cache: Path) -> None:
    store = open_store(cache, keep_epochs=LIVE)
    admit(store, make_objects(40, 10))
    for n in range(LIVE):
        assert store.cut(n, force=True) == n
    store.close()


def _ls_l(control: Path) -> dict[str, int]:
    """What ``ls -l`` reads: the listing, and each entry's size."""
    return {name: os.lstat(control / name).st_size for name in os.listdir(control)}


@pytest.mark.parametrize("api", ["lowlevel", "highlevel"])
def test_listing_the_control_folder_again_builds_no_tree(tmp_path: Path, api: str) -> None:
    cache = tmp_path / "cache"
    _live_epochs(cache)
    with mounted(cache, tmp_path / "mnt", args=("--fuse-api", api, "--warm-files", "0")) as m:
        control = m.path / ".epochfs"
        first = _ls_l(control)
        assert {f"epoch-{n}.manifest" for n in range(LIVE)} <= set(first)
        built = m.log_text().count(": tree built")
        assert built >= LIVE, "each live epoch's tree was built once for the first listing"
        for _ in range(3):
            assert _ls_l(control) == first
        assert m.log_text().count(": tree built") == built, "a later listing rebuilt trees"
        for n in range(LIVE):  # the sizes listed are the manifests' own
            assert len((control / f"epoch-{n}.manifest").read_bytes()) == first[f"epoch-{n}.manifest"]


def test_the_view_sizes_a_manifest_it_no_longer_keeps_built_without_a_build(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cache = tmp_path / "cache"
    _live_epochs(cache)
    store = open_store(cache, keep_epochs=LIVE)
    view = View(store=store, link_root=(cache / "objects").absolute())
    caplog.set_level("DEBUG", logger="epochfs.fuse")
    names = [f"/.epochfs/epoch-{n}.manifest" for n in range(LIVE)]
    view.listdir("/.epochfs")  # classes.json's first look records every epoch's folders too
    built = caplog.text.count(": tree built")
    assert built >= LIVE
    sizes = [view.getattr(name).size for name in names]
    for _ in range(3):
        assert [view.getattr(name).size for name in names] == sizes
        assert [attr.size for name, attr in view.listdir("/.epochfs") if name.endswith(".manifest")] == sizes
    assert caplog.text.count(": tree built") == built, "sizing a manifest no longer kept rebuilt its tree"
    assert [len(view.read_file(name)) for name in names] == sizes
    store.close()
