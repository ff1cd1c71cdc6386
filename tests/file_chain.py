"""Files under folders nested past what one path may name: made one folder descriptor at a time,
as the ``file://`` remote reads them (its walk and opens go relative to folder handles)."""

from __future__ import annotations

import os
import stat
from pathlib import Path


def make_chain(root: Path, folders: list[bytes], name: bytes, body: bytes) -> str:
    """The file ``folders/.../name`` under ``root``, made one folder descriptor at a time; its key."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for folder in folders:
            os.mkdir(folder, dir_fd=fd)
            inner = os.open(folder, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        out = os.open(name, os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(out, body)
        os.close(out)
    finally:
        os.close(fd)
    return b"/".join([*folders, name]).decode()


def remove_tree(path: Path) -> None:
    """Remove the folder ``path`` and everything under it, one descriptor at a time and without
    recursion: ``shutil.rmtree`` (pytest's clean-up of its temporary folders among its callers)
    fails on Python's recursion limit under a chain of a thousand folders."""
    names: list[str] = []
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        while True:
            entries = os.listdir(fd)
            folder = next((e for e in entries
                           if stat.S_ISDIR(os.stat(e, dir_fd=fd, follow_symlinks=False).st_mode)), None)
            if folder is not None:
                inner = os.open(folder, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
                os.close(fd)
                fd, _ = inner, names.append(folder)
                continue
            for entry in entries:
                os.unlink(entry, dir_fd=fd)
            if not names:
                break
            parent = os.open("..", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = parent
            os.rmdir(names.pop(), dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(path)
