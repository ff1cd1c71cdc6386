"""The dependency rules of DESIGN.md, checked on the source: a broken rule fails here, not in review.

- torchclient imports nothing from epochfs.sidecar or epochfs.fuse (it installs without them);
- fuse imports only the store module of sidecar (the one contract), never remote, sampler or kube.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def imported_modules(path: Path) -> set[str]:
    """Absolute module names a file imports (relative imports resolved inside its package)."""
    package = "epochfs." + path.parent.name
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package if node.level == 1 else "epochfs"
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def epochfs_imports(folder: str) -> dict[str, set[str]]:
    out = {}
    for path in sorted((ROOT / folder).glob("*.py")):
        mods = {m for m in imported_modules(path) if m.startswith("epochfs.")}
        out[path.name] = mods
    return out


def test_torchclient_imports_neither_sidecar_nor_fuse() -> None:
    for name, mods in epochfs_imports("torchclient").items():
        bad = {m for m in mods if m.startswith(("epochfs.sidecar", "epochfs.fuse"))}
        assert not bad, f"torchclient/{name} imports {sorted(bad)}"


def test_fuse_imports_only_the_store_from_sidecar() -> None:
    for name, mods in epochfs_imports("fuse").items():
        bad = {
            m for m in mods
            if m.startswith("epochfs.sidecar") and not m.startswith("epochfs.sidecar.store")
        }
        assert not bad, f"fuse/{name} imports {sorted(bad)}"


@pytest.mark.parametrize("source,expected", [
    ("from epochfs.sidecar import store", {"epochfs.sidecar", "epochfs.sidecar.store"}),
    ("from .view import View", {"epochfs.fuse.view", "epochfs.fuse.view.View"}),
])
def test_the_checker_sees_imports(tmp_path: Path, source: str, expected: set[str]) -> None:
    pkg = tmp_path / "fuse"
    pkg.mkdir()
    (pkg / "m.py").write_text(source + "\n")
    assert imported_modules(pkg / "m.py") == expected
