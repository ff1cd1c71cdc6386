"""The docs' ``epochfs sidecar`` lines, run for real (issue 21: everything the docs tell a user to
type is run by a test).

tests/deploy/test_docs_commands.py classifies them; this module holds what runs them:

- :func:`seed` puts into the sandbox's moto server the objects the docs' complete lines name:
  ``s3://bucket/dataset`` as the layout pages describe it (:func:`small_objects`: two class
  folders of images under ``train/``, a ``val/`` image, 64 ``shards/*.tar`` and a README that no
  ``--include`` takes; :func:`many_arrays`: 1,000 ``train/*.npz``, put only for the lines that
  ask for ``--min-samples 1000``, seconds of uploads). The lines' own values stay as written:
  ``--min-samples 1000`` gets 1,000 objects to cut from.
- :func:`run_until_ready` runs one line until ``/readyz`` says ready, checks that the view shows
  epoch 0 with at least ``--min-samples`` samples whose bytes are the bucket's, stops it with
  SIGTERM and checks that it exits 0 and leaves nothing mounted.
- :func:`env_problems` checks a fragment line's ``EPOCHFS_*`` assignments against the variables
  the command reads (the fragments' flags are checked by the module's ``help_problems``).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import subprocess
import tarfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from common import wait_until
from docs_blocks import words
from sidecar_helpers import cleanup_mounts, leftover_mounts

from epochfs.fuse.mounting import DEFAULT_LINK_ROOT_NAME, find_mount
from epochfs.torchclient import layout
from epochfs.torchclient.cutask import CutAnswer, ask_cut

READY_TIMEOUT = 120.0
"""Seconds a line may take to get ready: 1,000 tiny objects from moto take a few, on a busy
2-core machine many more."""
ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=")


def npz(i: int) -> bytes:
    """One sample of docs/layouts/arrays.md: ``x`` float32 (16,), ``y`` int64 ()."""
    out = io.BytesIO()
    np.savez(out, x=np.full(16, i, np.float32), y=np.int64(i % 10))
    return out.getvalue()


def tar(i: int) -> bytes:
    """One WebDataset shard of docs/layouts/shards.md: ``<key>.png`` + ``<key>.cls``."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as t:
        for name, body in ((f"{i:06d}.png", b"\x89PNG shard %d" % i), (f"{i:06d}.cls", b"%d" % (i % 10))):
            info = tarfile.TarInfo(name)
            info.size = len(body)
            t.addfile(info, io.BytesIO(body))
    return out.getvalue()


def many_arrays() -> dict[str, bytes]:
    """Key -> bytes of docs/layouts/arrays.md's samples: as many as its ``--min-samples``."""
    return {f"dataset/train/{i:05d}.npz": npz(i) for i in range(1000)}


def small_objects() -> dict[str, bytes]:
    """Key -> bytes of the other objects of ``s3://bucket`` the docs' complete sidecar lines read."""
    objects = {"dataset/train/ant/000.png": b"\x89PNG ant", "dataset/train/cat/001.jpg": b"\xff\xd8\xff cat",
                "dataset/val/ant/100.png": b"\x89PNG val ant",
                "dataset/README.md": b"# not a sample: --include leaves it out\n"}
    objects |= {f"dataset/shards/train-{i:05d}.tar": tar(i) for i in range(64)}
    return objects


def seed(endpoint: str, objects: dict[str, bytes]) -> dict[str, bytes]:
    """Put ``objects`` into the bucket ``bucket`` of the moto server at ``endpoint`` (eight uploads
    at once: 1,000 one at a time take several seconds) and return them."""
    import boto3

    s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing",
                      aws_secret_access_key="testing", region_name="us-east-1")
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda item: s3.put_object(Bucket="bucket", Key=item[0], Body=item[1]),
                      objects.items()))
    return objects


@dataclass(frozen=True)
class SidecarLine:
    """What a complete sidecar line asks for, read from its words as the CLI reads them."""

    remote: str
    mount: Path
    cache: Path
    folder_view: bool
    min_samples: int

    @classmethod
    def of(cls, argv: list[str]) -> SidecarLine:
        def flag(name: str, default: str | None = None) -> str:
            for i, word in enumerate(argv):
                if word == name and i + 1 < len(argv):
                    return argv[i + 1]
                if word.startswith(name + "="):
                    return word.split("=", 1)[1]
            assert default is not None, f"the line has no {name}: {argv}"
            return default

        return cls(flag("--remote"), Path(flag("--mount")), Path(flag("--cache")),
                   flag("--view", "fuse") == "folder", int(flag("--min-samples", "1")))


def get_json(url: str) -> tuple[int, dict[str, Any]]:
    """An endpoint's status and JSON body (0 and {} while nothing answers)."""
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            code, body = int(r.status), r.read()
    except urllib.error.HTTPError as e:
        code, body = e.code, e.read()
    except OSError:
        return 0, {}
    try:
        return code, json.loads(body)
    except ValueError:
        return code, {}


def split_assignments(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """A line's leading ``VAR=value`` words (the shell puts them in the program's environment)
    and the program's argv."""
    env: dict[str, str] = {}
    while argv and ASSIGNMENT.match(argv[0]):
        name, value = argv[0].split("=", 1)
        env[name] = value
        argv = argv[1:]
    return env, argv


@contextlib.contextmanager
def started(argv: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The line's process, in a session of its own; killed if still running when the block ends
    (a failed check), so no sidecar outlives its test."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def epoch0_problems(line: SidecarLine, port: int, objects: dict[str, bytes]) -> list[str]:
    """What is wrong with the view once ready: no ``status.json``, no epoch 0 (asked for as a
    trainer would: a lookup on the FUSE view, ``POST /v1/cut`` on the folder view), fewer samples
    than ``--min-samples``, or an entry whose bytes are not its object's."""
    bucket, _, prefix = line.remote.removeprefix("s3://").partition("/")
    if line.folder_view:
        answers: list[CutAnswer | None] = []

        def asked() -> bool:
            """Published, or asked for once more (as the torch client asks while it waits)."""
            if layout.epoch_exists(line.mount, 0):
                return True
            answers.append(ask_cut(f"http://127.0.0.1:{port}", 0, timeout=10))
            if answers[-1] is not None and answers[-1].final:
                raise AssertionError(f"POST /v1/cut?epoch=0 answered {answers[-1]}")
            return False

        try:
            wait_until(asked, timeout=60, interval=0.5, what="epoch-0 published")
        except TimeoutError as e:
            return [f"{e}; the last cut answers: {answers[-3:]}"]
    elif not layout.epoch_exists(line.mount, 0):  # the lookup asks for the cut
        return [f"{line.mount}/epoch-0 is not there"]
    problems = [] if layout.read_status(line.mount) is not None else ["no .epochfs/status.json"]
    manifest = layout.read_manifest(line.mount, 0)
    if manifest is None:
        return [*problems, "epoch 0 has no manifest"]
    if len(manifest.paths) < line.min_samples:
        problems.append(f"epoch 0 holds {len(manifest.paths)} samples, --min-samples is {line.min_samples}")
    epoch = layout.epoch_dir(line.mount, 0)
    for path in manifest.paths:
        want = objects.get(f"{prefix}/{path}" if prefix else path) if bucket == "bucket" else None
        if (epoch / path).read_bytes() != want:
            problems.append(f"epoch-0/{path} is not the bytes of s3://{bucket}/{prefix}/{path}")
    return problems


def run_until_ready(line: str, env: dict[str, str], log: Path, port: int,
                    objects: dict[str, bytes]) -> None:
    """Run a complete sidecar line: ready, epoch 0 shown, SIGTERM, exit 0, nothing left mounted.

    Ready is ``/readyz``'s 200 (docs/sidecar.md: mounted, and epoch 0 exists or could be cut now,
    which needs ``--min-samples`` complete samples), the trainer's start signal: nothing less. A
    line whose process exits meanwhile fails with its output."""
    assignments, argv = split_assignments(words(line))
    sidecar = SidecarLine.of(argv)
    run_env = {**env, "EPOCHFS_HEALTH_PORT": str(port), **assignments}  # the line's flag wins
    try:
        with started(argv, run_env, log) as proc:
            readyz = f"http://127.0.0.1:{port}/readyz"
            try:
                wait_until(lambda: get_json(readyz)[0] == 200 or proc.poll() is not None,
                           timeout=READY_TIMEOUT, what=f"/readyz of {line}")
            except TimeoutError as e:
                raise AssertionError(f"{e}: {get_json(readyz)}\n{log.read_text()[-5000:]}") from None
            assert proc.poll() is None, f"exited {proc.returncode} before it was ready:\n{log.read_text()}"
            if not sidecar.folder_view:
                entry = find_mount(sidecar.mount)
                assert entry is not None and entry.fstype.startswith("fuse"), f"no FUSE mount: {entry}"
            problems = epoch0_problems(sidecar, port, objects)
            assert not problems, "\n".join(problems) + f"\n{log.read_text()[-5000:]}"
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=30)
            assert code == 0, f"exited {code} after SIGTERM:\n{log.read_text()[-5000:]}"
        left = leftover_mounts(sidecar.mount, sidecar.cache / DEFAULT_LINK_ROOT_NAME)
        assert not left, f"left mounted: {left}"
    finally:
        cleanup_mounts(sidecar.mount, sidecar.cache / DEFAULT_LINK_ROOT_NAME)


def min_samples_of(line: str) -> int:
    """The ``--min-samples`` of a complete sidecar line (1, the CLI's default, where it has none)."""
    return SidecarLine.of(split_assignments(words(line))[1]).min_samples


def env_problems(text: str, help_text: str) -> list[str]:
    """The line's leading ``EPOCHFS_*`` assignments that its command does not read: every one it
    reads is a flag's, and ``--help`` names it beside the flag (``(env EPOCHFS_EXCLUDE)``, made
    from the same declaration as the lookup: sidecar/config.py ``add_arguments``)."""
    assignments, _ = split_assignments(words(text))
    return [f"the command reads no {name}" for name in assignments
            if name.startswith("EPOCHFS_") and not re.search(rf"\benv\s+{name}\b", help_text)]
