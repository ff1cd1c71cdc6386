"""A cache whose folder this user may write but whose files belong to another user (a hostPath
cache filled by a root sidecar, then started under another uid, its top folder alone given to
the new user): every command that writes in the cache refuses it at start, exit 2 and one line
naming ``--cache``, the first file it cannot write, its owner and the fix, never a traceback
(``PermissionError`` from the sampler's lock, "attempt to write a readonly database" from
``cut``) that the sidecar restarts for ever as a crash. ``epochfs status``, which only reads,
still reads such a cache.

The commands run for real, without any capability (:func:`folderview_helpers.unprivileged`): they
keep uid 0, whose Python lives under /root, so the cache's files are given to another uid instead.
The cache is filled by the real sampler and ``epochfs cut`` (:func:`cut_cache_helpers.make_cut_cache`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from common import free_port
from cut_cache_helpers import ENV, CutCache, make_cut_cache
from folderview_helpers import unprivileged
from test_cli_user_errors import refusal

from epochfs.sidecar.samplerlock import LOCK_NAME
from epochfs.sidecar.store import INDEX_NAME, OBJECTS_DIR, TMP_DIR
from epochfs.sidecar.store.memberformat import MEMBERS_DIR

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="gives the cache's files to another uid")

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))
OTHER = 65534
"""The uid the cache's files are given to (nobody): not this process's."""

WRITERS = ("sample", "sidecar", "mount", "publish", "cut", "relist", "verify")


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> CutCache:
    return make_cut_cache(tmp_path_factory.mktemp("filled"))


@pytest.fixture
def cache(filled: CutCache, tmp_path: Path) -> Iterator[Path]:
    """A copy of the filled cache, everything in it another user's, the folder itself ours."""
    copy = tmp_path / "cache"
    shutil.copytree(filled[0], copy, symlinks=True)
    give_away(copy, *(Path(d) / n for d, dirs, files in os.walk(copy) for n in (*dirs, *files)))
    yield copy


def give_away(cache: Path, *entries: Path) -> None:
    for entry in entries:
        os.lchown(cache / entry, OTHER, OTHER)


def run(command: str, cache: Path, tmp_path: Path, data: Path) -> subprocess.CompletedProcess[str]:
    extra = {
        "sample": ["--remote", data.as_uri(), "--capacity", "64Mi"],
        "sidecar": ["--remote", data.as_uri(), "--capacity", "64Mi", "--mount", str(tmp_path / "view"),
                    "--health-port", str(free_port())],
        "mount": ["--mount", str(tmp_path / "view")],
        "publish": ["--mount", str(tmp_path / "view")],
    }.get(command, [])
    argv = unprivileged([EPOCHFS, command, "--cache", str(cache), *extra])
    return subprocess.run(argv, capture_output=True, text=True, env=ENV, timeout=60)




def owned_by_other(command: str, cache: Path, entry: Path) -> str:
    return (f"epochfs {command}: --cache {cache}: cannot write in it: {entry} belongs to uid {OTHER}, "
            f"not to this user (uid 0): permission denied; run as uid {OTHER}, or give the cache to "
            f"this user (chown -R 0 {cache})")


@pytest.mark.parametrize("command", WRITERS)
def test_a_writer_refuses_a_cache_whose_files_are_another_users(
    command: str, cache: Path, filled: CutCache, tmp_path: Path
) -> None:
    index = cache / INDEX_NAME
    before = index.read_bytes()
    line = refusal(run(command, cache, tmp_path, filled[1]))
    assert line == owned_by_other(command, cache, index)
    assert index.read_bytes() == before


def first_fanout(cache: Path) -> Path:
    return min(p for p in (cache / OBJECTS_DIR).iterdir() if len(p.name) == 2)


@pytest.mark.parametrize("entry", ["lock", "objects", "fanout", "tmp", "epochs", "members"])
def test_the_first_file_or_folder_it_cannot_write_is_named(
    entry: str, filled: CutCache, tmp_path: Path
) -> None:
    """Only one of the cache's entries is another user's: that one is named (the sampler's lock
    file ended in a ``PermissionError`` traceback, a fan-out folder of ``objects/`` in failed
    admissions and evictions)."""
    cache = tmp_path / "cache"
    shutil.copytree(filled[0], cache, symlinks=True)
    path = {
        "lock": cache / LOCK_NAME,
        "objects": cache / OBJECTS_DIR,
        "fanout": first_fanout(cache),
        "tmp": cache / TMP_DIR,
        "epochs": cache / MEMBERS_DIR,
        "members": next((cache / MEMBERS_DIR).glob("*.members")),
    }[entry]
    give_away(cache, path)
    line = refusal(run("sample", cache, tmp_path, filled[1]))
    assert line == owned_by_other("sample", cache, path)


def test_a_file_of_this_user_without_write_access_is_named_with_chmod(
    filled: CutCache, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    shutil.copytree(filled[0], cache, symlinks=True)
    (cache / INDEX_NAME).chmod(0o444)
    line = refusal(run("cut", cache, tmp_path, filled[1]))
    assert line == (f"epochfs cut: --cache {cache}: cannot write in it: {cache / INDEX_NAME} (mode 0444, "
                    f"this user's): permission denied; give its user write access (chmod -R u+w {cache})")


def test_status_still_reads_a_cache_whose_files_are_another_users(
    cache: Path, filled: CutCache, tmp_path: Path
) -> None:
    proc = run("status", cache, tmp_path, filled[1])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "epoch" in proc.stdout and "NOT RUNNING" in proc.stdout, proc.stdout


def test_the_sampler_lock_taken_later_is_refused_in_one_line(cache: Path) -> None:
    """The lock's own refusal, for a lock file put there after the start check: the same line."""
    code = ("import sys; from pathlib import Path; from epochfs.sidecar import samplerlock; "
            "from epochfs.sidecar.config import ConfigError\n"
            "try:\n    samplerlock.hold(Path(sys.argv[1]))\n"
            "except ConfigError as e:\n    print(e)\n")
    proc = subprocess.run(unprivileged([sys.executable, "-c", code, str(cache)]), capture_output=True,
                          text=True, env=ENV, timeout=60)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout.strip() == owned_by_other("sample", cache, cache / LOCK_NAME).removeprefix(
        "epochfs sample: ")
