"""A cache's start empties its ``tmp/`` and removes the files in ``objects/`` that its index does
not know: so a dataset inside the cache folder, or a folder that is no cache holding a ``tmp/``
or ``objects/`` of its own, is refused before anything is removed (exit 2, one line).

An exploratory run with bad input found ``epochfs sample --cache C --remote file://C/tmp/ds``
removing every file of the dataset ("removed the folder ... from the cache's temp folder") and
then refusing the remote, and a project folder given as ``--cache`` losing its ``tmp/``. Real
``epochfs`` processes over real folders.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EPOCHFS = str(Path(sys.executable).parent / "epochfs")


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _dataset(folder: Path) -> dict[str, bytes]:
    (folder / "sub").mkdir(parents=True)
    for i in range(3):
        (folder / "sub" / f"{i}.bin").write_bytes(bytes([i]) * 100)
    return _files(folder)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EPOCHFS, *args], capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize("inside", ["tmp/ds", "objects/ds", "ds"])
def test_a_dataset_inside_the_cache_folder_is_refused_and_kept(tmp_path: Path, inside: str) -> None:
    cache = tmp_path / "cache"
    data = (cache / inside).resolve()
    files = _dataset(data)
    out = _run("sample", "--cache", str(cache), "--remote", f"file://{data}", "--capacity", "1Mi")
    assert out.returncode == 2, out.stderr
    [line] = out.stderr.strip().splitlines()
    assert line == (f"epochfs sample: --remote file://{data}: the dataset's folder {data} is inside "
                    f"--cache {cache}, which epochfs fills and empties: move the dataset out of it"), line
    assert _files(data) == files


def test_a_dataset_inside_the_sidecars_mount_folder_is_refused(tmp_path: Path) -> None:
    view = tmp_path / "view"
    files = _dataset(view / "ds")
    out = _run("sidecar", "--cache", str(tmp_path / "cache"), "--mount", str(view),
               "--remote", f"file://{view / 'ds'}", "--capacity", "1Mi", "--health-port", "0")
    assert out.returncode == 2, out.stderr
    assert f"is inside --mount {view}, which epochfs fills and empties" in out.stderr, out.stderr
    assert _files(view / "ds") == files
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("folder", ["tmp", "objects"])
def test_a_folder_that_is_no_cache_keeps_its_tmp_and_objects(tmp_path: Path, folder: str) -> None:
    data = tmp_path / "data"
    _dataset(data)
    project = tmp_path / "project"
    (project / folder / "src").mkdir(parents=True)
    (project / folder / "src" / "main.py").write_text("print('mine')\n")
    before = _files(project)
    out = _run("sample", "--cache", str(project), "--remote", f"file://{data}", "--capacity", "1Mi")
    assert out.returncode == 2, out.stderr
    said = (f"--cache {project}: not an epochfs cache (no index.sqlite), and its tmp/ or objects/ hold "
            f"what no cache makes ({folder}/src), which a cache's start would remove")
    assert said in out.stderr, out.stderr
    assert _files(project) == before
    assert sorted(p.name for p in project.iterdir()) == [folder], "nothing made there"


def test_a_cache_of_an_older_version_whose_index_is_gone_is_still_a_cache(tmp_path: Path) -> None:
    """A cache made before the objects/ marker existed, its index deleted: its temps and object
    files are a cache's (the start rebuilds the index from the members files), not refused."""
    from fuse_helpers import admit, make_objects, open_store

    from epochfs.sidecar.store.objects import OBJECTS_DIR, markers
    from epochfs.sidecar.volumes import check_cache

    cache = tmp_path / "old"
    with open_store(cache) as store:
        admit(store, make_objects(4, 10))
        (cache / "tmp" / f"{'ab' * 16}.part").write_bytes(b"partial")  # a download cut short
    for suffix in ("", "-wal", "-shm"):
        (cache / f"index.sqlite{suffix}").unlink(missing_ok=True)
    for marker in markers(cache / OBJECTS_DIR):
        (cache / OBJECTS_DIR / marker).rmdir()
    check_cache(cache, create=True)
