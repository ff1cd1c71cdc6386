"""The shape issue 24 asks of the remote side, checked on the code itself so that it stays:

- no import cycle among the modules of ``epochfs.sidecar.remote``, ``epochfs.sidecar.listing`` and
  the downloader (a cycle ties modules that cannot then be read, tested or moved one at a time;
  ``listing/indexfile`` and ``listing/inventory`` imported each other);
- each constant in one home: a name given a literal value in one of these modules is not given
  the same literal again in another, nor in the store the downloader records into, nor in the
  modules beside them that held a copy (``SHARING``) (a copy drifts: the pages of a stream, the
  block size, ``size-only`` and the cut request's path were each written two to four times); one
  name for two different things (each module's ``POLL``) is not a copy;
- no object of these modules reads another's private attributes (``filt._lock``): what two
  objects share is a method or a constructor argument, so either can change its insides;
- no module of the remote package is over :data:`LONGEST` lines: one concern a module, read in
  one sitting (``s3`` and ``errors`` were split along their seams: ``s3read``, ``librules``).

The graph is grimp's (import-linter's, ``make lint``), built from the sources; the rest reads the
modules' syntax trees. Nothing is imported or run.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("epochfs.sidecar.remote", "epochfs.sidecar.listing", "epochfs.sidecar.download")
FILES = sorted([*ROOT.glob("sidecar/remote/*.py"), *ROOT.glob("sidecar/listing/*.py"),
                ROOT / "sidecar" / "download.py"])
SHARING = [ROOT / "sidecar" / "store" / "digests.py", ROOT / "sidecar" / "store" / "integrity.py",
           ROOT / "sidecar" / "cutrequest.py", ROOT / "torchclient" / "cutask.py",
           ROOT / "torchclient" / "layout.py"]
"""Modules beside these packages that held a copy of one of their constants or of each other's:
the store's scrub its block size (``BLOCK``), both ends of the cut request its path (``CUT_PATH``)."""
APART = {
    "MAX_EPOCH": "the store imports nothing of the torch client, the client nothing of the sidecar; "
                 "tests/torchclient/test_layout.py checks the two agree",
}
"""Constants kept in two homes on purpose, each with the reason: no module both sides may import."""
STORE_EXPORTS = ROOT / "sidecar" / "store" / "__init__.py"
LITERAL_NODES = (ast.Constant, ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop, ast.Tuple, ast.Load)
"""A value written out (``1000``, ``1 << 20``, ``"size-only"``, ``(0.5, 30.0)``), not computed
from other names."""


def _ours(module: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in PACKAGES)


def test_no_import_cycle_among_the_remote_the_listing_and_the_downloader() -> None:
    graph = grimp.build_graph("epochfs", include_external_packages=False)
    modules = sorted(m for m in graph.modules if _ours(m))
    assert len(modules) > 20, modules  # the packages were found
    cycles = []
    for importer in modules:
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            if imported != importer and _ours(imported):
                back = graph.find_shortest_chain(importer=imported, imported=importer)
                if back is not None:
                    cycles.append(f"{importer} -> {' -> '.join(back)}")
    assert not cycles, "\n".join(cycles)


def _literal_constants(path: Path) -> dict[tuple[str, object], int]:
    """Module-level ``NAME = <literal>`` (upper case): (name, value), each with its line."""
    found: dict[tuple[str, object], int] = {}
    for node in ast.parse(path.read_text(), str(path)).body:
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        if value is None:
            continue
        if not all(isinstance(n, LITERAL_NODES) for n in ast.walk(value)):
            continue  # computed from or taken from elsewhere: not a copy of a value
        literal = eval(compile(ast.Expression(value), str(path), "eval"), {"__builtins__": {}})
        for target in targets:
            if isinstance(target, ast.Name) and target.id.isupper():
                found[(target.id, repr(literal))] = node.lineno
    return found


def _store_constants() -> dict[tuple[str, object], str]:
    """The upper-case literals the store's package exports, as (name, value), with the module
    each comes from."""
    found: dict[tuple[str, object], str] = {}
    for node in ast.parse(STORE_EXPORTS.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.module:
            names = {alias.name for alias in node.names if alias.name.isupper()}
            path = ROOT / "sidecar" / Path(*node.module.split(".")[2:]).with_suffix(".py")
            for (name, literal), _ in _literal_constants(path).items():
                if name in names:
                    found[(name, literal)] = node.module
    return found


def test_each_constant_has_one_home() -> None:
    homes: dict[tuple[str, object], list[str]] = defaultdict(list)
    for path in [*FILES, *SHARING]:
        for constant, line in _literal_constants(path).items():
            homes[constant].append(f"{path.relative_to(ROOT)}:{line}")
    assert homes[("BLOCK", repr(1 << 20))] and homes[("CUT_PATH", repr("/v1/cut"))]  # the scan reads
    scanned = {f"epochfs.{p.relative_to(ROOT).with_suffix('').as_posix().replace('/', '.')}" for p in SHARING}
    for constant, module in _store_constants().items():
        if constant in homes and module not in scanned:
            homes[constant].append(f"{module} (the store's)")
    copies = {name: where for (name, _), where in homes.items() if len(where) > 1 and name not in APART}
    assert not copies, "\n".join(f"{name}: {', '.join(where)}" for name, where in sorted(copies.items()))


LIBRARY_INTERNALS = {
    "gcsfs.GCSFileSystem._request": "gcsfs binds its retry count in a decorator on it, with no "
                                    "option to change it (remote/fsspec.py, one_try_gcs)",
    "os._exit": "the standard library's documented way for a forked child to end without the "
                "parent's cleanups (listing/child.py, fork_child)",
}
"""A client library's private parts read on purpose, each with the reason: not our objects, whose
insides a method would share instead."""


def _private_reads(path: Path) -> list[str]:
    """``x._name`` where ``x`` is not ``self`` or ``cls``, less :data:`LIBRARY_INTERNALS`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Attribute):
            continue
        name = node.attr
        if not name.startswith("_") or (name.startswith("__") and name.endswith("__")):
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        if ast.unparse(node) not in LIBRARY_INTERNALS:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_object_reads_anothers_private_attributes() -> None:
    reads = [read for path in FILES for read in _private_reads(path)]
    assert not reads, "\n".join(reads)


LONGEST = 400
"""The repository's sign of a module that holds more than one concern."""


def test_no_module_of_the_remote_package_is_over_the_longest() -> None:
    lengths = {path.name: len(path.read_text().splitlines()) for path in ROOT.glob("sidecar/remote/*.py")}
    assert len(lengths) > 10 and "s3.py" in lengths  # the package was found
    over = {name: n for name, n in lengths.items() if n > LONGEST}
    assert not over, f"over {LONGEST} lines: {over}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_files_checked_parse(path: Path) -> None:
    assert ast.parse(path.read_text())
