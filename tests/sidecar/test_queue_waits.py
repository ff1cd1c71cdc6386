"""No timed get on a ``queue.SimpleQueue`` anywhere in the package.

With several consumers, CPython 3.11's ``SimpleQueue.get(timeout=...)`` can wait with no timeout:
a consumer woken by a put whose item another consumer took, once past its deadline, waits again
with a negative (infinite) timeout, until the next put. After the last put it never returns.
``epochfs index`` hung that way after its last span in 1 of 5 runs of its throttle test, and the
sampler's listers polled the same way (seen with three consumers and a busy producer: gets with a
10 ms timeout took up to 0.6 s, and one consumer in six runs never returned). This keeps the
pattern out of the code; ``queue.Queue`` computes its waits correctly.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import epochfs

PACKAGE = Path(epochfs.__file__).resolve().parent


def _timed_simplequeue_gets(tree: ast.AST) -> list[int]:
    """Lines of ``X.get(timeout=...)`` / ``X.get(block, timeout)`` where X (a name or ``self.attr``)
    is assigned a ``SimpleQueue`` in the same module."""
    def target_name(node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            return f"{node.value.id}.{node.attr}"
        return None

    simple: set[str] = set()
    for node in ast.walk(tree):
        value = getattr(node, "value", None)
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, ast.AnnAssign) else [])
        if isinstance(value, ast.Call) and "SimpleQueue" in ast.unparse(value.func):
            simple.update(n for n in map(target_name, targets) if n)
    lines = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                and target_name(node.func.value) in simple
                and (any(k.arg == "timeout" for k in node.keywords) or len(node.args) >= 2)):
            lines.append(node.lineno)
    return lines


def test_the_package_has_no_timed_get_on_a_simple_queue() -> None:
    found = {}
    paths = sorted(Path(d, f) for d, _, files in os.walk(PACKAGE, followlinks=True) for f in files
                   if f.endswith(".py"))  # the package's folders are links to the top-level ones
    assert len(paths) > 100
    for path in paths:
        lines = _timed_simplequeue_gets(ast.parse(path.read_text(), str(path)))
        if lines:
            found[str(path.relative_to(PACKAGE))] = lines
    assert found == {}


def test_the_scan_finds_the_pattern() -> None:
    code = ("import queue\nq = queue.SimpleQueue()\nq.get(timeout=1)\nclass A:\n"
            "    def f(self):\n        self.t = queue.SimpleQueue()\n        self.t.get(True, 0.5)\n"
            "        self.t.get()\n        r = queue.Queue()\n        r.get(timeout=1)\n")
    assert _timed_simplequeue_gets(ast.parse(code)) == [3, 7]
