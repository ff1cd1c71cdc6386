"""A key of up to 4,096 bytes (what ``epochfs.sidecar.keys`` lets through) is published by the
folder view. Joined to the view's folder and the tree's temporary name, such a key's path passes
the kernel's limit on one path (PATH_MAX): the publisher died at every start with "File name too
long" (a traceback, restarted five times) and no epoch was ever published, for one key of a
dataset. Every path of a tree is now made relative to the tree's own folder. Real index, real
publishers (built ahead and whole) into real folders; the trees read back through descriptors, as
no path to the long entry can be opened whole."""

from __future__ import annotations

import os
from pathlib import Path

from folderview_helpers import pair, settle
from fuse_helpers import admit, make_objects, open_store

from epochfs.sidecar.folderview_links import LinkTree
from epochfs.torchclient.publish import write_tree

LONG = "/".join(["d" * 213] * 19) + "/" + "f" * (4080 - 19 * 214)
"""A 4,080-byte key of 20 parts: past PATH_MAX once any folder's path is put before it."""


def fd_tree(base: Path) -> dict[str, str]:
    """Relative path -> symlink target of every entry below ``base``, walked through descriptors."""
    found: dict[str, str] = {}

    def walk(fd: int, rel: str) -> None:
        for entry in os.scandir(fd):
            path = f"{rel}{entry.name}"
            if entry.is_symlink():
                found[path] = os.readlink(entry.name, dir_fd=fd)
            else:
                sub = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
                try:
                    walk(sub, path + "/")
                finally:
                    os.close(sub)

    top = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    try:
        walk(top, "")
    finally:
        os.close(top)
    return found


def test_a_long_key_is_published_by_both_folder_views(tmp_path: Path) -> None:
    assert len(LONG) == 4080 and len(str(tmp_path / "ahead" / LONG)) > 4096
    store = open_store(tmp_path / "cache")
    objects = {**make_objects(6, 20, prefix="a/"), LONG: b"hello"}
    admit(store, objects)
    store.cut(0)
    ahead, whole = pair(store, tmp_path)
    settle(ahead)
    for publisher in (ahead, whole):
        assert (publisher.folder / "epoch-0").is_dir()
        tree = fd_tree(publisher.folder / "epoch-0")
        assert sorted(tree) == sorted(objects), publisher.folder
        assert tree[LONG].startswith("/efs/")
    manifest = (ahead.folder / ".epochfs" / "epoch-0.manifest").read_text().splitlines()
    assert sorted(line.split("\t")[0] for line in manifest[1:]) == sorted(objects)  # after its header


def test_the_tree_built_ahead_links_and_unlinks_a_long_entry(tmp_path: Path) -> None:
    links = LinkTree(tmp_path, ".epochfs-")
    parent, _, name = LONG.rpartition("/")
    links.link_into(parent, [(name, "/efs/x", False)])
    links.link_into("a", [("b", "/efs/y", False)])
    links.sync_dirs()
    assert fd_tree(links.path) == {LONG: "/efs/x", "a/b": "/efs/y"}
    links.unlink(LONG)  # the folders it leaves empty go with it
    assert fd_tree(links.path) == {"a/b": "/efs/y"}
    assert sorted(os.listdir(links.path)) == ["a"]
    links.show(tmp_path / "epoch-3", 0o555)
    assert fd_tree(tmp_path / "epoch-3") == {"a/b": "/efs/y"}


def test_an_epoch_written_whole_holds_a_long_entry(tmp_path: Path) -> None:
    parent = LONG.rpartition("/")[0]
    folders = {parent.rsplit("/", k)[0] for k in range(parent.count("/") + 1)}
    write_tree(tmp_path / "t", {"", *folders}, {LONG: "/efs/x", "top": "/efs/y"}, 0o555)
    assert fd_tree(tmp_path / "t") == {LONG: "/efs/x", "top": "/efs/y"}


def test_a_retired_tree_with_a_long_entry_is_removed_without_privilege(tmp_path: Path) -> None:
    """The folders of a published tree are 0555; removing one opens them up first, and a process
    without CAP_DAC_OVERRIDE (the folder view's sidecar is unprivileged) needs that for the long
    entry's folders too."""
    import subprocess
    import sys

    from folderview_helpers import unprivileged

    parent = LONG.rpartition("/")[0]
    folders = {parent.rsplit("/", k)[0] for k in range(parent.count("/") + 1)}
    write_tree(tmp_path / "t", {"", *folders}, {LONG: "/efs/x", "top": "/efs/y"}, 0o555)
    os.chmod(tmp_path / "t", 0o555)
    code = ("import sys, pathlib; from epochfs.torchclient.publish import remove_tree; "
            "remove_tree(pathlib.Path(sys.argv[1]))")
    done = subprocess.run(unprivileged([sys.executable, "-c", code, str(tmp_path / "t")]),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "t").exists()
