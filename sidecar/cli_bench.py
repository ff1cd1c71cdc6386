"""``epochfs bench``: the benchmarks this installation holds, each run as a process of its own.

Apart from :mod:`.cli` because it finds the benchmarks by name without importing them (nothing in
the product imports ``epochfs.benchmarks``; the sidecar image has none).
"""

from __future__ import annotations

import argparse
import sys

from epochfs.sidecar import config

DEFAULT_BENCHMARKS = ("fetch", "mount", "loader")
"""What ``epochfs bench`` runs without names (served_opens needs fanotify: named, it runs too)."""
NOT_BENCHMARKS = frozenset({"harness", "synthetic_s3"})  # helpers, not benchmarks


def installed_benchmarks() -> list[str] | None:
    """The modules of ``epochfs.benchmarks`` that are benchmarks, found without importing any of them
    (nothing in the product imports that package); None where it is not installed (the image)."""
    import importlib.util
    import pkgutil

    spec = importlib.util.find_spec("epochfs.benchmarks")
    if spec is None or spec.submodule_search_locations is None:
        return None
    return sorted(m.name for m in pkgutil.iter_modules(spec.submodule_search_locations)
                  if not m.name.startswith("_") and m.name not in NOT_BENCHMARKS)


def cmd_bench(ns: argparse.Namespace) -> int:
    """Run each benchmark as ``python -m epochfs.benchmarks.<name>``, one process each."""
    import subprocess

    known = installed_benchmarks()
    if not known:
        raise config.ConfigError(
            "this installation of epochfs holds no benchmarks (the sidecar image leaves them out): "
            "install the epochfs package with its bench extra, pip install 'epochfs[bench]', "
            "or use a source checkout"
        )
    names = ns.names or [n for n in DEFAULT_BENCHMARKS if n in known]
    for name in names:
        if name not in known:
            raise config.ConfigError(f"unknown benchmark {name!r} (known: {', '.join(known)})")
    status = 0
    for name in names:
        print(f"== epochfs bench {name}", flush=True)
        # -P: nothing is imported from the working folder, wherever the command runs.
        command = [sys.executable, "-P", "-m", f"epochfs.benchmarks.{name}", *ns.args]
        status = max(status, exit_status(name, subprocess.run(command).returncode))
    return status


def exit_status(name: str, returncode: int) -> int:
    """A benchmark's exit status as a shell reports it: a process a signal ended (kill -9, the OOM
    killer) has a negative returncode, which ``max`` with 0 took for success; it counts as 128 +
    the signal, and says so."""
    if returncode >= 0:
        return returncode
    import signal

    try:
        what = signal.Signals(-returncode).name
    except ValueError:
        what = f"signal {-returncode}"
    print(f"epochfs bench: {name} was killed by {what}", file=sys.stderr, flush=True)
    return 128 - returncode
