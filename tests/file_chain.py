"""Files under folders nested past what one path may name: made one folder descriptor at a time,
as the ``file://`` remote reads them (its walk and opens go relative to folder handles)."""

from __future__ import annotations

import os
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
