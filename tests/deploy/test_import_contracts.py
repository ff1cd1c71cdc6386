"""The dependency rules (.importlinter, drawn in docs/architecture.md) hold, and they can fail.

`make lint` runs `lint-imports` too; here it runs on the real tree, then on a copy of the three
packages into which one forbidden import is written: the contract that forbids it must break.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import epochfs

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
PACKAGES = ("sidecar", "fuse", "torchclient")


def lint_imports(cwd: Path, *args: str, pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    env["COLUMNS"] = "200"
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_tree_keeps_every_contract() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert " 0 broken." in result.stdout


@pytest.fixture(scope="module")
def copy_of_the_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The packages under their import names, laid out as installed (``epochfs`` a namespace or a
    regular package), in a folder that goes first on PYTHONPATH."""
    base = tmp_path_factory.mktemp("tree")
    (base / "epochfs").mkdir()
    if epochfs.__file__ is not None:
        (base / "epochfs" / "__init__.py").write_text("")
    for name in PACKAGES:
        shutil.copytree(ROOT / name, base / "epochfs" / name,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy(ROOT / ".importlinter", base / ".importlinter")
    result = lint_imports(base, pythonpath=base)
    assert result.returncode == 0, "the unchanged copy keeps the contracts:\n" + result.stdout
    return base


def _store_module(base: Path) -> str:
    """The store as it is laid out now: a module or a package."""
    store = base / "epochfs" / "sidecar" / "store"
    return "sidecar/store/__init__.py" if store.is_dir() else "sidecar/store.py"


@pytest.mark.parametrize("module,line,contract", [
    ("fuse/view.py", "from epochfs.sidecar import download", "fuse-imports-only-the-store"),
    ("fuse/view.py", "from epochfs.torchclient import loader", "fuse-imports-only-the-layout"),
    ("torchclient/dataset.py", "import epochfs.fuse.view", "torchclient-alone"),
    ("torchclient/layout.py", "import torch", "layout-without-torch"),
    ("sidecar/remote/base.py", "from epochfs.sidecar import download", "layers"),
    ("sidecar/download.py", "from epochfs.sidecar import supervisor", "layers"),
    ("sidecar/remote/base.py", "from epochfs.fuse import view", "sampler-without-fuse"),
    ("STORE", "from epochfs.sidecar import config", "store-at-the-bottom"),
], ids=lambda v: v if "/" not in v and " " not in v else None)
def test_a_forbidden_import_breaks_its_contract(copy_of_the_tree: Path, module: str, line: str,
                                                contract: str) -> None:
    path = copy_of_the_tree / "epochfs" / (_store_module(copy_of_the_tree) if module == "STORE" else module)
    original = path.read_text()
    path.write_text(original + f"\n\ndef _forbidden() -> None:\n    {line}  # noqa\n")
    try:
        result = lint_imports(copy_of_the_tree, "--contract", contract, pythonpath=copy_of_the_tree)
    finally:
        path.write_text(original)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "0 kept, 1 broken." in result.stdout, result.stdout
