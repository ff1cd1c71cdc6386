"""A verifying reader for the soak (tests/sidecar/test_soak.py): one process, run as a script.

Over and over it takes the newest epoch (``latest``), reads its manifest, and reads every listed
file through the mount (for ``--view folder``: through the published folder, ``--mount`` naming it),
comparing its bytes to the remote's object (a copy of the remote's objects is in ``--expected``, one
file per key). It counts wrong bytes (bytes that differ, plus any length
difference) and failed opens or reads of listed files, and writes each failure as one JSON line to
``--events`` with its wall-clock time and the file's path, so the soak can tell failures during a
FUSE server restart, wrong bytes of a file it damaged on the node volume before the repair landed,
and failed opens of that file between its take-out and its repair, from the others (which must be
none). It stops when ``--stop`` exists and writes its totals as JSON to ``--out``.

    python tests/soak_readers.py --mount M --expected DIR --events FILE --out FILE --stop FILE [--pause S]
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import time
from pathlib import Path
from typing import Any, TextIO

from digest_helpers import checksum_like  # this script runs from tests/, where the helper is

MANIFEST_MAGIC = "#epochfs-manifest v1"


def wrong_bytes(got: bytes, want: bytes) -> int:
    """Bytes that differ, plus the length difference."""
    common = min(len(got), len(want))
    if got[:common] == want[:common]:
        return abs(len(got) - len(want))
    differing = sum(1 for a, b in zip(got[:common], want[:common], strict=True) if a != b)
    return differing + abs(len(got) - len(want))


def read_manifest(mount: Path, n: int) -> list[tuple[str, int, str]]:
    text = (mount / ".epochfs" / f"epoch-{n}.manifest").read_text()
    lines = text.split("\n")
    if not lines or not lines[0].startswith(MANIFEST_MAGIC):
        raise ValueError(f"epoch-{n}.manifest: no header: {text[:80]!r}")
    files = []
    for line in lines[1:]:
        if line:
            path, size, checksum = line.split("\t")[:3]
            files.append((path, int(size), checksum))
    return files


class Reader:
    def __init__(self, mount: Path, expected: Path, events: TextIO) -> None:
        self.mount = mount
        self.expected = expected
        self.events = events
        self.want: dict[str, str] = json.loads((expected / "checksums.json").read_text())
        self.totals: dict[str, Any] = {
            "passes": 0, "files": 0, "bytes": 0, "wrong_bytes": 0, "wrong_files": 0,
            "failed_opens": 0, "lookup_errors": 0, "manifest_mismatch": 0, "epochs": [],
        }

    def event(self, kind: str, **fields: Any) -> None:
        self.events.write(json.dumps({"t": time.time(), "kind": kind, **fields}) + "\n")
        self.events.flush()

    def newest(self) -> int | None:
        try:
            target = os.readlink(self.mount / "latest")
        except OSError as e:
            if e.errno != errno.ENOENT:  # no epoch yet is not an error
                self.totals["lookup_errors"] += 1
                self.event("lookup", what="latest", errno=e.errno, error=str(e))
            return None
        return int(target.removeprefix("epoch-"))

    def one_pass(self) -> None:
        n = self.newest()
        if n is None:
            time.sleep(0.2)
            return
        try:
            files = read_manifest(self.mount, n)
        except (OSError, ValueError) as e:
            self.totals["lookup_errors"] += 1
            self.event("lookup", what=f"epoch-{n}.manifest", errno=getattr(e, "errno", None), error=str(e))
            time.sleep(0.05)
            return
        for path, size, checksum in files:
            if self.want.get(path) != checksum:
                # The manifest vouches for bytes that are not the remote's.
                self.totals["manifest_mismatch"] += 1
                self.event("manifest", epoch=n, path=path, checksum=checksum, want=self.want.get(path))
            try:
                with open(self.mount / f"epoch-{n}" / path, "rb") as f:
                    data = f.read()
            except OSError as e:
                self.totals["failed_opens"] += 1
                alive = os.path.isdir(self.mount / f"epoch-{n}")
                self.event("open", epoch=n, path=path, errno=e.errno, error=str(e), epoch_there=alive)
                continue
            self.totals["files"] += 1
            self.totals["bytes"] += len(data)
            want = self.want.get(path)
            if len(data) != size or want is None or checksum_like(want, data) != want:
                bad = wrong_bytes(data, (self.expected / "objects" / path).read_bytes())
                self.totals["wrong_bytes"] += bad
                self.totals["wrong_files"] += 1
                self.event("wrong", epoch=n, path=path, wrong_bytes=bad, size=len(data))
        self.totals["passes"] += 1
        if not self.totals["epochs"] or self.totals["epochs"][-1] != n:
            self.totals["epochs"].append(n)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mount", type=Path, required=True)
    ap.add_argument("--expected", type=Path, required=True)
    ap.add_argument("--events", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--stop", type=Path, required=True)
    ap.add_argument("--pause", type=float, default=0.2, help="seconds between passes (a trainer's step)")
    args = ap.parse_args()
    os.nice(5)  # eight of these on a small machine must not starve the sidecar they test
    with open(args.events, "a") as events:
        reader = Reader(args.mount, args.expected, events)
        while not args.stop.exists():
            reader.one_pass()
            time.sleep(args.pause)
    reader.totals["epochs_read"] = len(reader.totals.pop("epochs"))
    args.out.write_text(json.dumps(reader.totals))


if __name__ == "__main__":
    main()
