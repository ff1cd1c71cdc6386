"""A cache made under a restrictive umask (077) is still readable through the view by a non-root
user: the object files are 0444 on purpose, and the folders a reader's path to them crosses (the
cache folder, ``objects/`` (the read-only bind ``objects-ro`` shows its mode) and
``objects/<ab>/``) are made 0755 by the store whatever the umask. Before, they took the process
umask and a non-root reader got EACCES on every sample. Real mount, real non-root reader
(``setpriv``); the store filled through the Store API; the index and ``tmp/`` are not loosened.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from common import S3Server, put_objects, random_objects, wait_until
from fuse_helpers import admit, make_objects, mounted, open_store
from sampler_helpers import running_sampler, s3_env
from sidecar_helpers import running_sidecar

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE"),
    pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv"),
]

READER = ("setpriv", "--reuid", "1000", "--regid", "1000", "--clear-groups")


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A folder any user may traverse (pytest's tmp_path sits below a 0700 folder of root's)."""
    d = Path(tempfile.mkdtemp(prefix="epochfs-umask-"))
    os.chmod(d, 0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_a_cache_made_under_umask_077_is_readable_by_a_non_root_user(open_dir: Path) -> None:
    cache, mount = open_dir / "cache", open_dir / "mnt"
    objects = make_objects(4, 256)
    old = os.umask(0o077)  # as `(umask 077; epochfs sample ...; epochfs mount ...)` would
    try:
        store = open_store(cache)
        admit(store, objects)
        assert store.cut(0) == 0
        store.close()
        with mounted(cache, mount):
            for key, body in objects.items():
                r = subprocess.run([*READER, "cat", str(mount / "epoch-0" / key)], capture_output=True,
                                   timeout=30)
                assert r.returncode == 0, r.stderr.decode(errors="replace")
                assert r.stdout == body
        for folder in (cache, cache / "objects", *(cache / "objects").glob("??")):
            assert stat.S_IMODE(folder.stat().st_mode) == 0o755, folder
        assert stat.S_IMODE((cache / "tmp").stat().st_mode) == 0o700  # not loosened
    finally:
        os.umask(old)


def test_epochfs_sample_under_umask_077_gives_a_view_others_read(s3: S3Server, open_dir: Path) -> None:
    """The reviewer's steps, ``(umask 077; epochfs sample ...; epochfs mount ...)``: the CLI's own
    check makes the missing cache folder (with the umask's 0700) before the store opens it; the
    store, making a new cache there, opens that folder to readers."""
    objects = random_objects(6, 2_000, prefix="train/")
    put_objects(s3, "bkt", {f"ds/{k}": v for k, v in objects.items()})
    cache, mount = open_dir / "cache", open_dir / "mnt"
    old = os.umask(0o077)
    try:
        with running_sampler(cache, "s3://bkt/ds", "--endpoint-url", s3.endpoint, "--capacity", "64Mi",
                             "--min-samples", str(len(objects)), env=s3_env(s3.endpoint)), \
                mounted(cache, mount) as m:
            wait_until(lambda: os.path.isdir(m.path / "epoch-0"), timeout=60, what="epoch-0 cut")
            for key, body in objects.items():
                r = subprocess.run([*READER, "cat", str(m.path / "epoch-0" / key)], capture_output=True,
                                   timeout=30)
                assert r.returncode == 0, r.stderr.decode(errors="replace")
                assert r.stdout == body
        assert stat.S_IMODE(cache.stat().st_mode) == 0o755
    finally:
        os.umask(old)


def test_a_sidecar_under_umask_077_gives_a_view_others_read(s3: S3Server, open_dir: Path) -> None:
    """The sidecar's path: the supervisor makes the fan-out folders ahead for its served counter
    (under its umask), and the sampler's store installs into them."""
    objects = random_objects(6, 2_000)
    put_objects(s3, "data", objects)
    old = os.umask(0o077)
    try:
        with running_sidecar(open_dir, remote="s3://data", endpoint=s3.endpoint,
                             extra=("--min-samples", "6")) as car:
            wait_until(lambda: os.path.isdir(car.mount / "epoch-0"), timeout=60, what="epoch-0 cut")
            for key, body in objects.items():
                r = subprocess.run([*READER, "cat", str(car.mount / "epoch-0" / key)],
                                   capture_output=True, timeout=30)
                assert r.returncode == 0, r.stderr.decode(errors="replace")
                assert r.stdout == body
    finally:
        os.umask(old)
