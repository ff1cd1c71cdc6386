"""The fetch benchmark's ``python-floor`` tool: the least a Python process does to fetch a set
durably and checked, with nothing of the sampler, to tell what is Python's and what is epochfs's.

``download-path`` (:mod:`._fetch_alone`) is epochfs's own download path in a fresh process: it
imports the S3 remote, the store and the downloader. This is less: the standard library's
``http.client``, ``ctypes`` and ``xml``, and two small pieces of epochfs so that it asks the
store exactly what the sampler asks (the presigned GET of :mod:`~epochfs.sidecar.remote.sigv4`,
with the stored checksum asked for) and hashes at the same speed (awscrt's CRC functions,
:mod:`~epochfs.sidecar.store.crtcrc`). One LIST (every page), then ``--concurrency`` threads, each
taking the next key: a new connection, the GET, the body read in 1 MiB blocks into page-aligned
memory, hashed, written past the page cache (``O_DIRECT``, buffered where the volume refuses it)
and fsynced, its CRC compared with the stored one. What the store's contract asks of every object
before it is admitted (DESIGN.md: temp file, fsync), without the rest of the contract (rename,
folder fsync, index), without retries, a fetch order, metrics or a listing process: a lower
bound of any Python sampler's start-up and per-object cost, not a usable tool.

Each body is checked against its stored CRC64NVME or CRC32C, else against its ETag where that is
a plain md5 (the benchmark's md5-only set); a body of another size or checksum fails the run.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import http.client
import mmap
import os
import sys
import threading
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import epochfs


def _own_module(name: str) -> Any:
    """One epochfs module of the standard library's imports only, loaded from its file without
    its packages: ``epochfs.sidecar.store``'s ``__init__`` imports the store (~60 modules, as many
    milliseconds), which a floor must not pay. Registered under its own name first, as an import
    does (a dataclass looks its module up there)."""
    import importlib.util

    path = Path(epochfs.__path__[0], *name.split(".")[1:]).with_suffix(".py")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


sigv4 = _own_module("epochfs.sidecar.remote.sigv4")
crtcrc = _own_module("epochfs.sidecar.store.crtcrc")

BLOCK = 1 << 20
"""Bytes read, hashed and written at a time (the sampler's block)."""

ALIGN = 4096
"""A direct write's boundary: the last block of a body is written rounded up, then cut back."""

NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


def listed(conn: http.client.HTTPConnection, presign: Any, bucket: str,
           prefix: str) -> Iterator[tuple[str, int]]:
    """Every (key, size) under ``prefix``, page after page."""
    token: str | None = None
    while True:
        params: dict[str, object] = {"Prefix": prefix}
        if token:
            params["ContinuationToken"] = token
        conn.request("GET", _path(presign.list_objects_v2(bucket, params)))
        answer = conn.getresponse()
        body = answer.read()
        if answer.status != 200:
            raise RuntimeError(f"LIST answered {answer.status}: {body[:200]!r}")
        root = ET.fromstring(body)
        for item in root.iter(NS + "Contents"):
            yield item.findtext(NS + "Key", ""), int(item.findtext(NS + "Size", "0"))
        token = root.findtext(NS + "NextContinuationToken")
        if root.findtext(NS + "IsTruncated") != "true" or not token:
            return


def _path(url: str) -> str:
    """A presigned URL's path and query: what an ``http.client`` request names."""
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}"


def fetch_one(host: str, presign: Any, bucket: str, key: str, size: int, dest: Path, buf: memoryview,
              crcs: dict[str, Callable[[Any, int], int]]) -> None:
    """GET ``key`` into ``dest``: hashed, written direct, fsynced, its CRC checked."""
    asked = {"x-amz-checksum-mode": "ENABLED"}
    conn = http.client.HTTPConnection(host)
    try:
        conn.request("GET", _path(presign.get_object(bucket, key, asked)), headers=asked)
        answer = conn.getresponse()
        if answer.status != 200:
            raise RuntimeError(f"GET {key} answered {answer.status}")
        check = Check(answer, crcs)
        try:
            fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_DIRECT, 0o644)
            direct = True
        except OSError:  # a volume that refuses O_DIRECT (EINVAL): buffered, as the sampler does
            fd, direct = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644), False
        try:
            total = 0
            while True:
                filled = _fill(answer, buf)
                if filled:
                    check.update(buf[:filled])
                    os.write(fd, buf[:-(-filled // ALIGN) * ALIGN if direct else filled])
                    total += filled
                if filled < len(buf):
                    break
            if direct:
                os.ftruncate(fd, total)
            os.fsync(fd)
        finally:
            os.close(fd)
    finally:
        conn.close()
    if total != size:
        raise RuntimeError(f"{key}: {total} bytes, listed {size}")
    if not check.matches():
        raise RuntimeError(f"{key}: {check.algorithm} does not match the stored one")


class Check:
    """The stored checksum of one answer, and the body's as it is read: CRC64NVME or CRC32C where
    one is stored, else md5 against a plain (single-part) md5 ETag."""

    def __init__(self, answer: http.client.HTTPResponse, crcs: dict[str, Callable[[Any, int], int]]) -> None:
        self._crc: Callable[[Any, int], int] | None = None
        self._md5: Any = None
        self._value = 0
        for algorithm in ("crc64nvme", "crc32c"):
            stored = answer.getheader(f"x-amz-checksum-{algorithm}")
            if stored:
                self.algorithm, self.wanted, self._crc = algorithm, stored, crcs[algorithm]
                return
        etag = (answer.getheader("ETag") or "").strip('"')
        if len(etag) != 32:
            raise RuntimeError(f"no CRC stored and ETag {etag!r} is no plain md5")
        self.algorithm, self.wanted, self._md5 = "md5", etag, hashlib.md5()

    def update(self, block: memoryview) -> None:
        if self._crc is not None:
            self._value = self._crc(block, self._value)
        else:
            self._md5.update(block)

    def matches(self) -> bool:
        if self._md5 is not None:
            return bool(self._md5.hexdigest() == self.wanted)
        width = 8 if self.algorithm == "crc64nvme" else 4
        return base64.b64encode(self._value.to_bytes(width, "big")).decode() == self.wanted


def _fill(answer: http.client.HTTPResponse, buf: memoryview) -> int:
    """Read until ``buf`` is full or the body ends; the bytes read."""
    filled = 0
    while filled < len(buf):
        got = answer.readinto(buf[filled:])
        if not got:
            break
        filled += got
    return filled


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True, help="s3://bucket/prefix")
    ap.add_argument("--endpoint", required=True, help="the S3 endpoint URL (http://host:port)")
    ap.add_argument("--dest", type=Path, required=True, help="where the objects end up, one file each")
    ap.add_argument("--concurrency", type=int, default=32, help="download threads")
    args = ap.parse_args(argv)

    light = sigv4.light_settings(args.endpoint)
    crcs = crtcrc.load()
    if light is None or crcs is None:
        ap.error("needs AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY in the environment and awscrt "
                 "(a release crtcrc.TESTED lists)")
    presign = sigv4.Presigner(light)
    bucket, _, prefix = args.url.removeprefix("s3://").partition("/")
    host = urlsplit(args.endpoint).netloc
    conn = http.client.HTTPConnection(host)
    try:
        keys = list(listed(conn, presign, bucket, prefix.rstrip("/") + "/" if prefix else ""))
    finally:
        conn.close()
    args.dest.mkdir(parents=True, exist_ok=True)
    work = iter(enumerate(keys))
    lock = threading.Lock()
    failures: list[BaseException] = []

    def worker() -> None:
        buf = memoryview(mmap.mmap(-1, BLOCK))
        while not failures:
            with lock:
                item = next(work, None)
            if item is None:
                return
            i, (key, size) = item
            try:
                fetch_one(host, presign, bucket, key, size, args.dest / f"{i:06d}", buf, crcs)
            except BaseException as e:  # told below; the other threads stop
                failures.append(e)

    threads = [threading.Thread(target=worker) for _ in range(args.concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        print(f"{len(failures)} downloads failed: {failures[:3]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
