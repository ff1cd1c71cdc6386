"""A real FUSE file system over a folder that refuses ``O_DIRECT`` (as some network and older
volumes do): its ``create`` and ``open`` answer ``EINVAL`` to the flag and count each refusal in
``<source>/.refused`` (one line each); everything else passes through to the folder.

Run as ``python tests/refusing_fs.py SOURCE MOUNTPOINT`` (foreground); :func:`refusing_mount`
starts it, waits for the mount and always unmounts.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REFUSED = ".refused"


def _serve(root: str, mountpoint: str) -> None:
    import mfusepy as fuse

    class Refusing(fuse.Operations):
        use_ns = True

        def _p(self, path: str) -> str:
            return root + path

        def _refuse(self, path: str, flags: int) -> None:
            if flags & os.O_DIRECT:
                with open(os.path.join(root, REFUSED), "a") as f:
                    f.write(path + "\n")
                raise fuse.FuseOSError(errno.EINVAL)

        def getattr(self, path: str, fh: Any = None) -> dict[str, Any]:
            try:
                st = os.lstat(self._p(path))
            except OSError as e:
                raise fuse.FuseOSError(e.errno) from None
            return {k: getattr(st, k) for k in ("st_mode", "st_size", "st_uid", "st_gid", "st_nlink",
                                                "st_atime_ns", "st_mtime_ns", "st_ctime_ns")}

        def readdir(self, path: str, fh: Any) -> list[str]:
            return [".", "..", *os.listdir(self._p(path))]

        def mkdir(self, path: str, mode: int) -> None:
            os.mkdir(self._p(path), mode)

        # raw_fi: create and open see the open's flags (fi.flags) and set the handle (fi.fh).
        def create(self, path: str, mode: int, fi: Any) -> int:
            self._refuse(path, fi.flags)
            fi.fh = os.open(self._p(path), os.O_RDWR | os.O_CREAT | os.O_EXCL, mode)
            return 0

        def open(self, path: str, fi: Any) -> int:
            self._refuse(path, fi.flags)
            fi.fh = os.open(self._p(path), fi.flags & ~(os.O_CREAT | os.O_EXCL))
            return 0

        def read(self, path: str, size: int, offset: int, fi: Any) -> bytes:
            return os.pread(fi.fh, size, offset)

        def write(self, path: str, data: bytes, offset: int, fi: Any) -> int:
            return os.pwrite(fi.fh, data, offset)

        def truncate(self, path: str, length: int, fi: Any = None) -> None:
            os.truncate(self._p(path), length)

        def fsync(self, path: str, datasync: int, fi: Any) -> None:
            os.fsync(fi.fh)

        def release(self, path: str, fi: Any) -> None:
            os.close(fi.fh)

        def unlink(self, path: str) -> None:
            os.unlink(self._p(path))

        def rename(self, old: str, new: str) -> None:
            os.rename(self._p(old), self._p(new))

    fuse.FUSE(Refusing(), mountpoint, foreground=True, raw_fi=True)


@contextlib.contextmanager
def refusing_mount(source: Path, mountpoint: Path, *, timeout: float = 20.0) -> Iterator[Path]:
    """Mount the refusing file system of ``source`` on ``mountpoint`` for the block."""
    mountpoint.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([sys.executable, __file__, str(source), str(mountpoint)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + timeout
        while not os.path.ismount(mountpoint):
            if proc.poll() is not None:
                assert proc.stderr is not None
                raise RuntimeError(f"the refusing file system exited: {proc.stderr.read()[-2000:]!r}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{mountpoint} not mounted after {timeout}s")
            time.sleep(0.02)  # polling the mount table: no event tells when FUSE is up
        yield mountpoint
    finally:
        subprocess.run(["fusermount3", "-u", str(mountpoint)], check=False, capture_output=True)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    _serve(sys.argv[1], sys.argv[2])
