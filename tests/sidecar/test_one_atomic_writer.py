"""The sidecar replaces a file in one way: :func:`epochfs.sidecar.store.objects.staged` and
:func:`~epochfs.sidecar.store.objects.replace_file` (temp beside the target, fsync, rename,
folder fsync, the temp removed on a failure). A writer of its own (``write_text`` then
``os.replace`` of a fixed ``.tmp`` name) tears a file on a crash, lets two writers share one temp
and leaves the temp behind on a failure.

So every rename in ``sidecar/`` is checked here against a list of the renames that are not a
file's new version (moves of a whole file or folder, the objects' install), each with its reason:
a new rename fails this test until it goes through the one writer or is listed with a reason.
The syntax trees are read; nothing is imported or run.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SIDECAR = ROOT / "sidecar"

RENAMES = {"os.replace", "os.rename", "os.renames", "shutil.move"}
"""The calls that rename by name."""

ALLOWED: dict[tuple[str, str], str] = {
    ("store/objects.py", "os.replace(self.temp, self.target)"):
        "the one writer itself (Staged.install)",
    ("store/fanout.py", "os.replace(temp, name, dst_dir_fd=fan_fd)"):
        "the objects' install: a download's fsynced temp, checked to be the file it wrote, renamed "
        "into its fan-out folder, journaled first, its folders fsynced after (ObjectFiles.install)",
    ("store/memberfiles.py", "os.replace(path_of(root, n), base_path_of(root, n))"):
        "a retiring epoch's members file moved aside whole (its name changes, not its bytes)",
    ("store/memberfiles.py", "os.replace(bases.pop(n), path_of(root, n))"):
        "a base file moved back whole as its live epoch's file (recovery's tidy)",
    ("store/memberpending.py", "os.replace(p, final)"):
        "a pending file, already written and fsynced in place, renamed to its epoch's name at the cut",
    ("store/integrity.py", "os.replace(keep, target)"):
        "a damaged object's second link moved into the quarantine whole (a post-mortem copy)",
    ("store/integrity.py", "os.replace(temp, target)"):
        "the quarantine's copy of a damaged object kept in place for its repair: read by no one but "
        "a person; its temp is removed on a failure. To go through replace_file with store/integrity.py",
    ("store/integrity.py", "os.replace(files.path_of(obj.sid), target)"):
        "a damaged object file moved into the quarantine whole",
    ("store/quarantinestray.py", "os.replace(temp, target)"):
        "a cut-short take-out's second link of a damaged object, finished into the quarantine whole "
        "as the take-out would have moved it",
    ("store/reset.py", 'os.replace(root / f"{INDEX_NAME}{suffix}", Path(f"{base}{suffix}"))'):
        "a damaged index's WAL and shared-memory files moved aside whole, kept for a post-mortem",
    ("store/reset.py", "os.replace(replacement, index)"):
        "a rebuilt index file (written and closed by SQLite) put in the damaged one's place by one "
        "rename, so index.sqlite is never missing; the folder fsynced after",
    ("folderview_lost.py", "os.rename(temp, entry)"):
        "a symlink (no bytes to fsync) renamed over a lost sample's entry; its folder fsynced after",
}
"""(path under ``sidecar/``, the call's source) -> why it is not a file's new version."""


def _is_rename(call: ast.Call) -> bool:
    """Whether ``call`` renames: a call in :data:`RENAMES`, or a path's ``replace(new)`` or
    ``rename(new)`` (one argument: ``str.replace`` takes two, ``dataclasses.replace`` is named)."""
    func = call.func
    if not isinstance(func, ast.Attribute):
        return False
    if isinstance(func.value, ast.Name) and f"{func.value.id}.{func.attr}" in RENAMES:
        return True
    if func.attr not in ("replace", "rename") or len(call.args) != 1 or call.keywords:
        return False
    return not (isinstance(func.value, ast.Name) and func.value.id == "dataclasses")


def renames() -> Counter[tuple[str, str]]:
    """Every rename in the sidecar's modules: (path under ``sidecar/``, source) -> how many."""
    found: Counter[tuple[str, str]] = Counter()
    for path in sorted(SIDECAR.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        text = path.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(text, filename=str(path))):
            if isinstance(node, ast.Call) and _is_rename(node):
                found[(path.relative_to(SIDECAR).as_posix(), ast.get_source_segment(text, node) or "")] += 1
    return found


def test_every_rename_in_the_sidecar_is_the_one_writer_or_a_listed_move() -> None:
    found = renames()
    unlisted = sorted(k for k in found if k not in ALLOWED)
    assert not unlisted, (
        "a rename outside the one atomic writer (store/objects.py: staged, replace_file); replace "
        f"the file through it, or list the move in ALLOWED with its reason: {unlisted}")


def test_each_listed_move_is_still_there() -> None:
    """A listed rename that is gone goes from the list too: the list names only what is there."""
    found = renames()
    assert not sorted(k for k in ALLOWED if k not in found), "listed but no longer in the sidecar"


def test_the_scan_sees_a_hand_written_writer(tmp_path: Path) -> None:
    """The check itself: the writer this test keeps out is a rename it finds."""
    code = 'tmp.write_text(doc)\nos.replace(tmp, path)\ntmp.rename(path)\nlabel.replace("a", "b")\n'
    calls = [n for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Call)]
    assert [ast.get_source_segment(code, n) for n in calls if _is_rename(n)] == [
        "os.replace(tmp, path)", "tmp.rename(path)"]
