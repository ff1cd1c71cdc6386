"""The folder view made under a restrictive umask (077) is readable by the trainer's user.

The folder view's sidecar runs as its own user and the trainer as another (in a pod: fsGroup, or
the image's users), so every folder on a reader's path must let others in whatever the sidecar's
umask: the view's folder, which the sidecar makes where it is missing (a subdirectory of the
pod's shared volume), its ``.epochfs/`` control folder, the epochs' trees, the manifests and
``status.json``, and the cache folders the links point into. Real ``epochfs sidecar --view
folder`` without capabilities, a ``file://`` remote, and a reader of another uid (``setpriv``)
that lists the epoch, reads its manifest through the torch client's layout and reads every sample.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from common import random_objects, wait_until
from folderview_helpers import cut, folder_sidecar, owned_dir, write_remote

from epochfs.torchclient import layout

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                reason="needs root and setpriv (a reader of another uid)")

READER = ("setpriv", "--reuid", "4242", "--regid", "4242", "--clear-groups")
"""A user that is neither the sidecar's nor in its group."""


def as_reader(*argv: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*READER, *argv], capture_output=True, timeout=30)


def test_a_folder_view_made_under_umask_077_is_read_by_another_user() -> None:
    objects = random_objects(8, 1_500, prefix="train/")
    with owned_dir() as base:
        os.chmod(base, 0o755)  # mkdtemp's 0700 would shut the reader out before epochfs's folders
        remote = base / "remote"
        write_remote(remote, objects)
        (base / "shared").mkdir(mode=0o755)  # the pod's shared volume; the view's folder in it is epochfs's
        old = os.umask(0o077)  # the sidecar inherits it, as `(umask 077; epochfs sidecar ...)` would
        try:
            with folder_sidecar(base, remote, extra=("--min-samples", str(len(objects)))) as car:
                view: Path = car.mount
                wait_until(lambda: (layout.read_status(view) or {}).get("samples") == len(objects),
                           timeout=60, what="every object sampled")
                assert cut(car, "epoch=0")[0] == 200  # as the torch client asks
                wait_until(lambda: layout.epoch_exists(view, 0), timeout=30, what="epoch-0 published")
                listed = as_reader("find", str(view / "epoch-0"), "-type", "l")
                modes = {p.name: oct(stat.S_IMODE(p.stat().st_mode))
                         for p in (view, view / ".epochfs", view / "epoch-0", car.cache)}
                assert listed.returncode == 0, (modes, listed.stderr.decode(errors="replace"))
                assert len(listed.stdout.split()) == len(objects)
                manifest = as_reader("cat", str(view / ".epochfs" / layout.manifest_name(0)))
                assert manifest.returncode == 0, manifest.stderr.decode(errors="replace")
                for key, body in objects.items():
                    got = as_reader("cat", str(view / "epoch-0" / key))
                    assert got.returncode == 0, f"{key}: {got.stderr.decode(errors='replace')}"
                    assert got.stdout == body, key
        finally:
            os.umask(old)
