"""epochfs: train on a growing local sample of a remote dataset, served as ``epoch-N/`` folders.

One distribution, three packages, each a top-level folder of the source tree:
``epochfs.sidecar`` (``sidecar/``), ``epochfs.fuse`` (``fuse/``) and ``epochfs.torchclient``
(``torchclient/``), plus the benchmarks (``benchmarks/``, ``epochfs.benchmarks``; not in the
image). This folder, ``src/epochfs/``, is the package that holds them: the entries beside this
file are symlinks to those folders, so that ``src/`` is an ordinary import
root. An editable install (``make venv``) puts ``src/`` on ``sys.path`` with a plain ``.pth`` path
entry, which mypy, pyright and any other tool follow, and a module added to any of the folders is
importable at once, without reinstalling. A wheel holds the files themselves.

There is deliberately no ``epochfs/`` folder at the repository root: a process started there
(``python -c``, the supervisor's children) would import it instead of the installed package.

``epochfs.__version__`` is the installed distribution's version (``version`` in pyproject.toml is
the one place it is written), read on first use so that importing epochfs does not pay for
:mod:`importlib.metadata`.
"""

from __future__ import annotations

__version__: str  # set on first use by __getattr__ below


def __getattr__(name: str) -> str:
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        value = version("epochfs")
    except PackageNotFoundError:  # a source tree on sys.path that was never installed
        value = "0+unknown"
    globals()["__version__"] = value
    return value
