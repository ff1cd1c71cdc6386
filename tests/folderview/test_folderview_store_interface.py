"""The folder view's parts ask the store only what :class:`~epochfs.sidecar.store.reader.FolderReader`
declares, as the store's reader module says: each part takes a ``store`` typed against that
protocol (never :class:`~epochfs.sidecar.store.Store` itself, which only the process opens), and
every call they make on a store is one of its members, which :class:`Store` answers. mypy checks
the calls against the annotations (``make lint``); this checks that the annotations are the
protocol's, so that mypy's check is the one the docstring promises. Read from the sources: nothing
is run.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from epochfs.sidecar.store import Store
from epochfs.sidecar.store.reader import EpochReader, FolderReader

ROOT = Path(__file__).resolve().parents[2]
PARTS = sorted((ROOT / "sidecar").glob("folderview_*.py"))
PROCESS = ROOT / "sidecar" / "folderview.py"


def _members(protocol: type) -> set[str]:
    """The protocol's methods and attributes, its bases' included."""
    found: set[str] = set()
    for cls in protocol.__mro__:
        if cls in (EpochReader, FolderReader):
            found |= set(cls.__annotations__)
            found |= {name for name, _ in inspect.getmembers(cls, inspect.isfunction)}
    return found


def _store_annotations(tree: ast.Module) -> list[tuple[int, str]]:
    """Each argument named ``store`` with its annotation, as written."""
    return [(node.lineno, ast.unparse(node.annotation) if node.annotation else "")
            for node in ast.walk(tree) if isinstance(node, ast.arg) and node.arg == "store"]


def _store_calls(tree: ast.Module) -> set[str]:
    """Names read of a store: ``store.x``, ``self.store.x``, ``view.store.x``."""
    return {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
            and ((isinstance(node.value, ast.Name) and node.value.id == "store")
                 or (isinstance(node.value, ast.Attribute) and node.value.attr == "store"))}


def test_the_parts_take_the_folder_views_protocol() -> None:
    assert len(PARTS) > 8  # the parts were found
    wrong = [f"{path.name}:{line}: store: {annotation}" for path in [*PARTS, PROCESS]
             for line, annotation in _store_annotations(ast.parse(path.read_text()))
             if annotation != "FolderReader" and not (path == PROCESS and annotation == "Store")]
    assert not wrong, "\n".join(wrong)
    importing = [path.name for path in PARTS
                 for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.ImportFrom)
                 and (node.module or "").startswith("epochfs.sidecar.store")
                 and any(alias.name == "Store" for alias in node.names)]
    assert not importing, importing


def test_every_call_of_the_parts_is_declared_and_answered_by_the_store() -> None:
    declared = _members(FolderReader)
    calls = set().union(*(_store_calls(ast.parse(path.read_text())) for path in PARTS))
    assert {"samples_after", "epoch_extent", "record_read"} <= calls  # the scan reads
    assert calls <= declared, sorted(calls - declared)
    functions = declared - set(FolderReader.__annotations__) - set(EpochReader.__annotations__)
    assert all(callable(getattr(Store, name, None)) for name in functions), \
        sorted(name for name in functions if not callable(getattr(Store, name, None)))
