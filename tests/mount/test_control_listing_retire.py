"""The ``.epochfs`` folder lists the manifests of the live epochs, and an epoch that retired in the
store before the view's next refresh (at most half a second) is left out, not listed by a name
that fails, nor made to fail the whole listing.

Listed through a real mount (both libfuse APIs) right after each retirement, so most listings
land before the refresher noticed it; the view itself is checked too, where the order is certain.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from common import wait_until
from fuse_helpers import admit, make_objects, mounted, open_store

from epochfs.fuse.view import View

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                       reason="needs root and /dev/fuse"),
]

FAR = 10**7
"""Seconds ahead the retirement's clock is set: every in-use window has run out by then."""


def test_the_view_leaves_an_epoch_retired_since_its_refresh_out_of_the_control_folder(tmp_path: Path) -> None:
    store = open_store(tmp_path / "cache", keep_epochs=1)
    admit(store, make_objects(5, 10))
    assert store.cut(0) == 0 and store.cut(1) == 1
    view = View(store=store, link_root=tmp_path / "cache" / "objects")
    assert sorted(view.snapshot.live) == [0, 1]
    assert store.retire(now=time.time() + FAR) == [0]
    names = [name for name, _ in view.listdir("/.epochfs")]
    assert "epoch-1.manifest" in names and "epoch-0.manifest" not in names
    for name in names:
        view.getattr(f"/.epochfs/{name}")
    store.close()


@pytest.mark.parametrize("api", ["lowlevel", "highlevel"])
def test_listing_the_control_folder_right_after_a_retirement_lists_only_what_opens(
        tmp_path: Path, api: str) -> None:
    cache = tmp_path / "cache"
    store = open_store(cache, keep_epochs=2)
    admit(store, make_objects(5, 10))
    assert store.cut(0) == 0 and store.cut(1) == 1
    control = tmp_path / "mnt" / ".epochfs"
    with mounted(cache, tmp_path / "mnt", args=("--fuse-api", api)):
        for n in range(2, 10):
            assert store.cut(n, force=True) == n
            # Three live epochs; the view keeps the two manifests built last (n - 1 and n), so the
            # one that retires next (n - 2) must be read from the store again.
            wait_until(lambda n=n: f"epoch-{n}.manifest" in os.listdir(control), what=f"epoch {n}'s manifest")
            assert store.retire(now=time.time() + FAR) == [n - 2]
            names = os.listdir(control)  # before the refresher saw the retirement, mostly
            assert f"epoch-{n}.manifest" in names
            for name in names:
                assert os.stat(control / name).st_size > 0 or name == "classes.json", name
    store.close()
