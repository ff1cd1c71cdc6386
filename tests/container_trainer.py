"""The trainer of the container test: runs in the pod's trainer container (`python -c <this file>
<mode>`, in place of the chart's trainer command) as the chart's user, with only the standard
library, and reports what it saw as JSON files in its /tmp, which the test reads on the host (the
folder is an emptyDir there).

Why a script and not a torch job: the test checks what a training process meets through the
mount, byte for byte, and the same process must live through a FUSE server crash.

* result-0.json: epoch 0 read through the view's symlinks (sha256 and link target per file), the
  process's identity (uid, groups, capabilities, no_new_privs), and every write or create it tried
  in the view, through the symlink targets, in the cache and on its root filesystem, each with its
  errno name ("allowed" if it went through).
* mode "crash": then waits for /tmp/go-1 (the test has just killed the FUSE server) and reads
  epoch 1, a new epoch, retrying what fails on the way (each errno counted): result-1.json.
* mode "folder" (the sidecar's folder view): as "crash", but a lookup cuts nothing on a folder, so
  while an epoch is missing the trainer asks the sidecar for it as the torch client does
  (``POST /v1/cut?epoch=N`` on the base of EPOCHFS_REPORT_URL); the test kills the publisher.
Exit 0 when done; an unexpected exception exits non-zero with its traceback.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from typing import Any

MOUNT = os.environ["EPOCHFS_MOUNT"]
CACHE = os.environ["EPOCHFS_CACHE"]
VOLUME = os.path.dirname(MOUNT)  # the shared volume mounted at the view's parent


def publish(name: str, value: dict[str, Any]) -> None:
    tmp = f"/tmp/.{name}.part"
    with open(tmp, "w") as f:
        json.dump(value, f)
    os.replace(tmp, f"/tmp/{name}")


def errno_name(e: OSError) -> str:
    return errno.errorcode.get(e.errno or 0, str(e.errno))


def ask_cut(n: int, errors: Counter[str]) -> None:
    """What the torch client does on the folder view while epoch-n is missing."""
    base = os.environ["EPOCHFS_REPORT_URL"].split("/v1/", 1)[0]
    request = urllib.request.Request(f"{base}/v1/cut?epoch={n}", data=b"", method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5) as r:
            errors[f"cut {r.status}"] += 1
    except urllib.error.HTTPError as e:
        errors[f"cut {e.code}"] += 1
    except OSError as e:
        errors[f"cut {type(e).__name__}"] += 1


def read_epoch(n: int, timeout: float, *, ask: bool = False) -> dict[str, Any]:
    """Every file of epoch-n: a lookup asks for the cut (with ``ask``, a request to the sidecar);
    failures (ENOENT before the cut, ENOTCONN while the view is remounted) are retried until
    ``timeout``."""
    start = time.monotonic()
    errors: Counter[str] = Counter()
    root = os.path.join(MOUNT, f"epoch-{n}")
    while True:
        if ask and not os.path.isdir(root):
            ask_cut(n, errors)
        try:
            files, targets = {}, {}

            def fail(e: OSError) -> None:
                raise e

            for dirpath, _dirs, names in os.walk(root, onerror=fail):
                for name in names:
                    path = os.path.join(dirpath, name)
                    rel = os.path.relpath(path, root)
                    targets[rel] = os.readlink(path)
                    with open(path, "rb") as f:
                        files[rel] = hashlib.sha256(f.read()).hexdigest()
            if files:
                return {"epoch": n, "seconds": time.monotonic() - start, "errors": dict(errors),
                        "files": files, "targets": targets}
            errors["empty"] += 1
        except OSError as e:
            errors[errno_name(e)] += 1
        if time.monotonic() - start > timeout:
            return {"epoch": n, "error": f"not readable within {timeout}s", "errors": dict(errors)}
        time.sleep(0.05)


def attempt(action: Callable[[], object]) -> str:
    try:
        action()
    except OSError as e:
        return errno_name(e)
    return "allowed"


def create(path: str) -> None:
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))


def refusals(epoch: dict[str, Any]) -> dict[str, str]:
    """Writes and creates the trainer must not be able to make, and what each one answered."""
    root = os.path.join(MOUNT, f"epoch-{epoch['epoch']}")
    rel, target = next(iter(epoch["targets"].items()))
    view_file = os.path.join(root, rel)
    return {
        "write view file": attempt(lambda: open(view_file, "r+b").close()),
        "truncate view file": attempt(lambda: os.truncate(view_file, 0)),
        "create in epoch": attempt(lambda: create(os.path.join(root, "new"))),
        "mkdir in view": attempt(lambda: os.mkdir(os.path.join(MOUNT, "new"))),
        "unlink view file": attempt(lambda: os.unlink(view_file)),
        "rename in view": attempt(lambda: os.rename(view_file, view_file + ".x")),
        "create in volume": attempt(lambda: create(os.path.join(VOLUME, "new"))),
        "write target": attempt(lambda: open(target, "r+b").close()),
        "create beside target": attempt(lambda: create(os.path.join(os.path.dirname(target), "new"))),
        "unlink target": attempt(lambda: os.unlink(target)),
        "create in cache": attempt(lambda: create(os.path.join(CACHE, "new"))),
        "create on root fs": attempt(lambda: create("/opt/new")),
    }


def identity() -> dict[str, Any]:
    with open("/proc/self/status") as f:
        status = dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
    with open("/proc/self/mountinfo") as f:
        root_opts = next(line.split()[5] for line in f if line.split()[4] == "/")
    return {"uid": os.getuid(), "gid": os.getgid(), "groups": sorted(os.getgroups()),
            "cap_eff": status["CapEff"].strip(), "no_new_privs": status.get("NoNewPrivs", "").strip(),
            "root_read_only": "ro" in root_opts.split(",")}


def wait_for(path: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            sys.exit(f"trainer: {path} never appeared")
        time.sleep(0.05)


def main(mode: str) -> int:
    ask = mode == "folder"
    first = read_epoch(0, 120, ask=ask)
    if "error" not in first:
        first["refused"] = refusals(first)
    first["identity"] = identity()
    publish("result-0.json", first)
    if mode in ("crash", "folder"):
        wait_for("/tmp/go-1", 300)
        publish("result-1.json", read_epoch(1, 20, ask=ask))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "read"))
