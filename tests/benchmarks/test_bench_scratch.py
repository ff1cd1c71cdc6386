"""A benchmark's ``--dir`` is a folder of the user's: the run makes its own scratch folder inside it
and removes only that. ``--dir`` once named the scratch folder itself, emptied before the run and
removed after it (``mount --dir ~/data`` wiped ``~/data``).

Real runs at toy sizes (a second or two each); the mount benchmark's needs root and /dev/fuse.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from epochfs.benchmarks import folderview, harness, members_files, mount

needs_fuse = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                                reason="the mount benchmark mounts: needs root and /dev/fuse")


def users_folder(tmp_path: Path) -> Path:
    """A folder with something of the user's in it, as ``--dir`` may name."""
    folder = tmp_path / "userdir"
    (folder / "mydata").mkdir(parents=True)
    (folder / "mydata" / "precious.txt").write_text("important\n")
    return folder


def untouched(folder: Path) -> bool:
    """Only what :func:`users_folder` put there, as it was."""
    found = sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))
    return found == ["mydata", "mydata/precious.txt"] and (
        (folder / "mydata" / "precious.txt").read_text() == "important\n")


def test_work_dir_makes_its_own_folder_inside_the_one_given(tmp_path: Path) -> None:
    user = users_folder(tmp_path)
    with harness.work_dir(user, prefix="run-") as scratch:
        assert scratch.parent == user and scratch.name.startswith("run-")
        (scratch / "junk").write_bytes(b"x")
        assert (user / "mydata" / "precious.txt").exists()  # never emptied first
    assert untouched(user)  # the run's own folder gone, nothing else
    missing = tmp_path / "a" / "new"
    with harness.work_dir(missing) as scratch:
        assert scratch.parent == missing
    assert not missing.exists() and (tmp_path / "a").is_dir()  # made by it and empty: removed


def test_members_files_leaves_the_dir_given_as_it_was(tmp_path: Path) -> None:
    user = users_folder(tmp_path)
    assert members_files.main(["--members", "200", "--repeat", "1", "--encoders", "sql",
                               "--dir", str(user)]) == 0
    assert untouched(user)


def test_folderview_leaves_the_dir_given_as_it_was(tmp_path: Path) -> None:
    user = users_folder(tmp_path)
    assert folderview.main(["--dir", str(user), "--entries", "0", "--wait", "0", "--big", "0",
                            "--small", "0", "--no-drop"]) == 0
    assert untouched(user)


@needs_fuse
def test_mount_leaves_the_dir_given_as_it_was(tmp_path: Path) -> None:
    user = users_folder(tmp_path)
    assert mount.main(["--dir", str(user), "--big", "1", "--small", "2", "--procs", "1", "--repeat", "1",
                       "--pace", "0", "--no-drop"]) == 0
    assert untouched(user)
    assert str(user) not in Path("/proc/self/mountinfo").read_text()


@pytest.mark.parametrize("module", [mount, folderview, members_files])
def test_every_dir_help_says_it_is_a_parent(module: object, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        module.main(["--help"])  # type: ignore[attr-defined]
    shown = " ".join(capsys.readouterr().out.split())
    assert ("--dir DIR a folder in which the run makes its own scratch folder and removes it afterwards; "
            "nothing else in it is touched (default: ") in shown, shown
