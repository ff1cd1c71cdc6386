"""The shape issue 24 asks of the remote side, checked on the code itself so that it stays:

- no import cycle among the modules of ``epochfs.sidecar.remote``, ``epochfs.sidecar.listing`` and
  the downloader (a cycle ties modules that cannot then be read, tested or moved one at a time;
  ``listing/indexfile`` and ``listing/inventory`` imported each other);
- each constant in one home: a name given a literal value in one module of epochfs (``sidecar/``,
  ``fuse/``, ``torchclient/``) is not given the same literal again in another (a copy drifts: the
  pages of a stream, the block size, ``size-only`` and the cut request's path were each written
  two to four times); one name for two different things (each module's ``POLL``) is not a copy;
  nor is a function defined twice, word for word;
- no object of epochfs reads another's private attributes (``filt._lock``): what two objects
  share is a method or a constructor argument, so either can change its insides;
- the block size is written once (``BLOCK``), never as ``1 << 20`` where it is used;
- comments and docstrings give today's reasons, not the history of a change (``as before``,
  ``(issue 24``, ``stop 38``), which the commit log keeps;
- no module of the remote package is over :data:`LONGEST` lines: one concern a module, read in
  one sitting (``s3`` and ``errors`` were split along their seams: ``s3read``, ``librules``);
  nor any module of epochfs (``sidecar/``, ``fuse/``, ``torchclient/``) or of its benchmarks
  (``benchmarks/``), each over-long module named with its count.

The graph is grimp's (import-linter's, ``make lint``), built from the sources; the rest reads the
modules' syntax trees. Nothing is imported or run.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
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
    "FAIR_SPREAD": "the listing (listing/skew.py) is below the sampler (sampler/order.py) in the "
                   "layers, and the sampler's start-up imports nothing of the listing; "
                   "tests/sampler/test_listing_range_folders_pace.py checks the two agree",
}
"""Constants kept in two homes on purpose, each with the reason: no module both sides may import."""
EVERY_FILE = sorted(p for folder in ("sidecar", "fuse", "torchclient") for p in (ROOT / folder).rglob("*.py")
                    if "__pycache__" not in p.parts)
"""Every module of the three packages: where a constant, a function and a private part have one home."""
APART_FUNCTIONS = {
    "fsync_dir": "the store (sidecar/store/objects.py) may import nothing of epochfs but itself, the "
                 "torch client (torchclient/publish.py) nothing of the sidecar (.importlinter)",
}
"""Functions kept in two homes on purpose, each with the reason, as :data:`APART`."""
NOT_COPIES = {
    ("CHUNK", "20000"): "rows the folder view reads from the index at a time, and members per line of "
                        "an epoch's member record: two sizes that happen to agree",
    ("DUTY", "0.25"): "the share of time the store's window measurement may take, and the share of a "
                      "core its background full check may: each tuned to its own work",
}
"""Same name, same value, different quantities: not copies (changing one must not change the other).
An entry is still given two homes (the test fails on one that is not, so the list only shrinks)."""
COPIES_TO_REMOVE: dict[tuple[str, str], str] = {}
"""Copies that have a home to import from, each naming it: remove the copy and its entry here
together (the test fails on an entry whose copy is gone, so the list only shrinks)."""
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
    scanned = [*FILES, *SHARING, *EVERY_FILE]
    for path in sorted(set(scanned)):
        for constant, line in _literal_constants(path).items():
            homes[constant].append(f"{path.relative_to(ROOT)}:{line}")
    assert homes[("BLOCK", repr(1 << 20))] and homes[("CUT_PATH", repr("/v1/cut"))]  # the scan reads
    modules = {f"epochfs.{p.relative_to(ROOT).with_suffix('').as_posix().replace('/', '.')}" for p in scanned}
    for constant, module in _store_constants().items():
        if constant in homes and module not in modules:
            homes[constant].append(f"{module} (the store's)")
    copies = {constant: where for constant, where in homes.items()
              if len(where) > 1 and constant[0] not in APART and constant not in NOT_COPIES}
    single = sorted(constant for constant in NOT_COPIES if len(homes.get(constant, ())) < 2)
    assert not single, f"one home left: remove them from NOT_COPIES: {single}"
    _no_copies_but_those_to_remove(copies, functions=False)


def _no_copies_but_those_to_remove(copies: dict[tuple[str, object], list[str]], *, functions: bool) -> None:
    """No copy but those of :data:`COPIES_TO_REMOVE` of the kind checked (constants, or
    ``functions``), each of which is still a copy."""
    listed = {c for c in COPIES_TO_REMOVE if (c[1] == "function") == functions}
    found = {name: where for name, where in copies.items() if name not in listed}
    assert not found, "\n".join(f"{name}: {', '.join(where)}" for (name, _), where in sorted(found.items()))
    gone = sorted(listed - set(copies))
    assert not gone, f"no longer copies: remove them from COPIES_TO_REMOVE: {gone}"


def _module_functions(path: Path) -> dict[str, tuple[str, int]]:
    """Module-level functions: name -> (their arguments and body less the docstring, as the syntax
    tree dumps them; their line)."""
    found = {}
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                body = body[1:]  # the docstring: two copies may explain themselves differently
            if body:
                found[node.name] = (ast.dump(node.args) + ast.dump(ast.Module(body=body, type_ignores=[])),
                                    node.lineno)
    return found


def test_each_function_has_one_home() -> None:
    homes: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in EVERY_FILE:
        for name, (text, line) in _module_functions(path).items():
            homes[(name, text)].append(f"{path.relative_to(ROOT)}:{line}")
    assert any(name == "object_name" for name, _ in homes)  # the scan reads
    copies: dict[tuple[str, object], list[str]] = {
        (name, "function"): where for (name, _), where in homes.items()
        if len(where) > 1 and name not in APART_FUNCTIONS}
    _no_copies_but_those_to_remove(copies, functions=True)


LIBRARY_INTERNALS = {
    "gcsfs.GCSFileSystem._request": "gcsfs binds its retry count in a decorator on it, with no "
                                    "option to change it (remote/gcs.py, one_try_gcs)",
    "os._exit": "the standard library's documented way for a forked child to end without the "
                "parent's cleanups (listing/child.py, fork_child)",
    "client._endpoint": "botocore's endpoint of an S3 client, whose HTTP session sends a ListObjectsV2 "
                        "with the body left unread: botocore reads every answer whole before any hook, "
                        "and a page that never ends would take the memory (remote/s3botolist.py)",
    "mfusepy._libfuse": "the libfuse mfusepy loaded, which it names nowhere else: the low-level "
                        "calls and the kernel-cache notifications must go to that same library "
                        "(fuse/lowlevel_abi.py, lowlevel_notify.py, operations.py)",
    # torch's own state, which torch gives no public way to read or end:
    "group._get_backend(reduce_device()).options._timeout": "the process group's timeout, read to "
        "wait no longer than the group itself would (torchclient/groupwait.py)",
    "group._get_backend": "the same read's first step (torchclient/groupwait.py)",
    "dataloader._iterator": "a DataLoader's worker processes, shut down and dropped when the loader "
        "closes: the next epoch builds a DataLoader over a fresh plan (torchclient/loader.py)",
    # A DataLoader with a dead worker, ended without torch's shutdown, which can wait for ever on a
    # lock a killed worker held (torchclient/workers.py, end_after_a_death):
    "iterator._shutdown": "marks it ended, so torch's shutdown (and its __del__) does nothing more",
    "iterator._pin_memory_thread_done_event": "the pin-memory thread's own stop event",
    "iterator._worker_pids_set": "whether its workers are on torch's SIGCHLD watch",
    "signal_handling._remove_worker_pids": "takes them off that watch before they are ended",
}
"""A client library's private parts read on purpose, each with the reason: not our objects, whose
insides a method would share instead."""
NAMEDTUPLE_API = frozenset({"_replace", "_asdict", "_make", "_fields", "_field_defaults"})
"""A named tuple's public methods, underscored so as not to clash with its fields (prometheus
samples are named tuples: sidecar/metrics_merge.py)."""
OWN_MODULE = {
    "torchclient/dataset.py": {"dataset._holding", "dataset._close_hold"},
}
"""Private parts read by a module-level function of the module that defines their class, each
module with the reads: the fork hook ``os.register_at_fork`` takes a plain function, which closes
every dataset's copy of its hold in a forked child."""


def _own_names(tree: ast.Module) -> dict[str, set[str]]:
    """Each class of the module -> the underscored names it or its bases in the module define
    (methods, class attributes, ``self._x = ...``): an object of the class reading another's of
    the same class (a classmethod filling in the one it made) keeps the insides in one class."""
    own: dict[str, set[str]] = {}
    bases: dict[str, list[str]] = {}
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        names = own.setdefault(cls.name, set())
        bases[cls.name] = [b.id for b in cls.bases if isinstance(b, ast.Name)]
        for node in ast.walk(cls):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
                  and isinstance(node.value, ast.Name) and node.value.id == "self"):
                names.add(node.attr)

    def closure(name: str, seen: frozenset[str] = frozenset()) -> set[str]:
        found = set(own.get(name, ()))
        for base in bases.get(name, ()):
            if base not in seen:
                found |= closure(base, seen | {name})
        return found

    return {name: closure(name) for name in own}


def _private_reads(path: Path) -> list[str]:
    """``x._name`` where ``x`` is not ``self`` or ``cls``, less :data:`LIBRARY_INTERNALS`,
    :data:`NAMEDTUPLE_API`, :data:`OWN_MODULE` and an object's read of its own class's names."""
    tree = ast.parse(path.read_text(), str(path))
    own = _own_names(tree)
    allowed = OWN_MODULE.get(path.relative_to(ROOT).as_posix(), set())
    found = []

    def visit(node: ast.AST, names: set[str]) -> None:
        if isinstance(node, ast.ClassDef):
            names = own[node.name]
        for child in ast.iter_child_nodes(node):
            visit(child, names)
        if not isinstance(node, ast.Attribute):
            return
        name = node.attr
        if not name.startswith("_") or (name.startswith("__") and name.endswith("__")):
            return
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            return
        text = ast.unparse(node)
        if name in names or name in NAMEDTUPLE_API or text in LIBRARY_INTERNALS or text in allowed:
            return
        found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {text}")

    visit(tree, set())
    return found


def test_no_object_reads_anothers_private_attributes() -> None:
    reads = [read for path in sorted({*FILES, *EVERY_FILE}) for read in _private_reads(path)]
    assert len(EVERY_FILE) > 200  # the packages were found
    assert not reads, "\n".join(reads)


def test_the_block_size_is_named_where_it_is_used() -> None:
    """``1 << 20`` only as a named constant's value (``BLOCK``, the store's ``NO_ROOM_BYTES``...),
    never written out where a size is passed: a copy of ``BLOCK`` that drifts from it unseen."""
    inline = []
    for path in EVERY_FILE:
        tree = ast.parse(path.read_text(), str(path))
        named = {id(node.value) for node in tree.body if isinstance(node, ast.Assign | ast.AnnAssign)}
        for node in ast.walk(tree):
            if isinstance(node, ast.BinOp) and id(node) not in named and ast.unparse(node) == "1 << 20":
                inline.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not inline, "\n".join(inline)


HISTORY = re.compile(r"\bas before\b|\bas it always did\b|\bbefore this module\b|\(issue \d+|\bstop \d+\b"
                     r"|\bformerly\b", re.IGNORECASE)
"""Words that tell what the code did before a change rather than why it is as it is."""
HISTORY_TO_REWORD = {
    "torchclient/imagefolder.py", "torchclient/lost.py", "torchclient/resume.py",
}
"""Modules whose comments still tell history: reword them and remove them here together (the
test fails on a module listed that no longer does, so the list only shrinks)."""


def _history(path: Path) -> list[str]:
    """Where the comments and docstrings (any string standing as a statement) of ``path`` match
    :data:`HISTORY`."""
    source = path.read_text()
    texts = [(node.lineno, node.value.value) for node in ast.walk(ast.parse(source, str(path)))
             if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
             and isinstance(node.value.value, str)]
    texts += [(t.start[0], t.string) for t in tokenize.generate_tokens(io.StringIO(source).readline)
              if t.type == tokenize.COMMENT]
    return [f"{path.relative_to(ROOT)}:{line}: {m.group(0)}"
            for line, text in texts for m in HISTORY.finditer(text)]


def test_comments_give_todays_reasons() -> None:
    found = {path.relative_to(ROOT).as_posix(): _history(path) for path in EVERY_FILE}
    told = [where for module, hits in found.items() if module not in HISTORY_TO_REWORD for where in hits]
    assert not told, "\n".join(told)
    reworded = sorted(module for module in HISTORY_TO_REWORD if not found.get(module))
    assert not reworded, f"no history left: remove them from HISTORY_TO_REWORD: {reworded}"


LONGEST = 400
"""The repository's sign of a module that holds more than one concern."""


def test_no_module_of_the_remote_package_is_over_the_longest() -> None:
    lengths = {path.name: len(path.read_text().splitlines()) for path in ROOT.glob("sidecar/remote/*.py")}
    assert len(lengths) > 10 and "s3.py" in lengths  # the package was found
    over = {name: n for name, n in lengths.items() if n > LONGEST}
    assert not over, f"over {LONGEST} lines: {over}"


LENGTH_CHECKED = sorted(p for folder in ("sidecar", "fuse", "torchclient", "benchmarks")
                        for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts)
"""Every module of epochfs and of its benchmarks: where no module may hold more than one concern."""


def test_no_module_of_epochfs_or_its_benchmarks_is_over_the_longest() -> None:
    folders = {p.relative_to(ROOT).parts[0] for p in LENGTH_CHECKED}
    assert folders == {"sidecar", "fuse", "torchclient", "benchmarks"}, folders  # each was found
    lengths = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in LENGTH_CHECKED}
    over = sorted(f"{name} {n}" for name, n in lengths.items() if n > LONGEST)
    assert not over, f"over {LONGEST} lines: {', '.join(over)}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_files_checked_parse(path: Path) -> None:
    assert ast.parse(path.read_text())
