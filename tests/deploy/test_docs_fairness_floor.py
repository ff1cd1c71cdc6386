"""docs/fairness-floor.md's table is the table ``python -m epochfs.benchmarks.fairness_floor`` prints.

Why: the doc says its table is what the default command prints ("# the table below"), yet when a
key space shape was added to the bench (``bigtiny``) the command printed its rows and the doc went
on showing six shapes, and the module's help said "six shapes". A cheap real run of the command
(few trials, two sizes, no KS: the same key spaces) gives the shapes, folders and specs the doc
must show; the doc's rows per shape must be the default sizes, and no text may count the shapes
wrong.
"""

from __future__ import annotations

import re
import subprocess
import sys

from common import ROOT

from epochfs.benchmarks._keyspaces import SHAPES
from epochfs.benchmarks.fairness_floor import DEFAULT_SIZES
from epochfs.benchmarks.scale import label

DOC = ROOT / "docs" / "fairness-floor.md"
MODULE = "epochfs.benchmarks.fairness_floor"
NUMBERS = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
           "ten": 10, "eleven": 11, "twelve": 12}


def rows(table: str) -> list[list[str]]:
    """The data rows of a markdown table (header and rule left out), as lists of cells."""
    found = []
    for line in table.splitlines():
        if line.startswith("| ") and not line.startswith("| shape "):
            found.append([cell.strip() for cell in line.strip("|").split("|")])
    return found


def key_spaces(text: str) -> str:
    """The table's ``key spaces: ...`` line (the spec of every shape run)."""
    (line,) = [line for line in text.splitlines() if line.startswith("key spaces: ")]
    return line


def doc_table() -> str:
    return DOC.read_text().split("## The table", 1)[1].split("\n## ", 1)[0]


def run_small() -> str:
    """The command's table over the default key spaces, cheaply (seconds)."""
    done = subprocess.run([sys.executable, "-m", MODULE, "--trials", "5", "--no-ks", "--sizes", "2,10"],
                          capture_output=True, text=True, timeout=300, check=True)
    return done.stdout


def test_the_doc_shows_every_shape_the_command_prints_with_the_same_key_spaces() -> None:
    printed, shown = run_small(), doc_table()
    shapes_printed = list(dict.fromkeys((r[0], r[1]) for r in rows(printed)))
    shapes_shown = list(dict.fromkeys((r[0], r[1]) for r in rows(shown)))
    assert shapes_shown == shapes_printed, "regenerate the table: python -m " + MODULE
    assert [name for name, _ in shapes_printed] == list(SHAPES)
    assert key_spaces(shown) == key_spaces(printed)


def test_each_shape_of_the_doc_has_a_row_per_default_size() -> None:
    shown = rows(doc_table())
    for shape in SHAPES:
        assert [r[2] for r in shown if r[0] == shape] == [label(n) for n in DEFAULT_SIZES], shape


def test_no_text_counts_the_shapes_wrong() -> None:
    help_text = subprocess.run([sys.executable, "-m", MODULE, "--help"], capture_output=True, text=True,
                               timeout=120, check=True).stdout
    doc = DOC.read_text()
    for where, text in (("--help", help_text), ("docs/fairness-floor.md", doc)):
        for word in re.findall(r"\b(\w+) (?:key space )?shapes\b", text):
            count = NUMBERS.get(word.lower(), int(word) if word.isdigit() else None)
            assert count in (None, len(SHAPES)), f"{where} says {word} shapes; there are {len(SHAPES)}"
    listed = re.search(r"shape of the bench \(([^)]*)\)", " ".join(doc.split()))
    assert listed is not None and listed.group(1).split(", ") == list(SHAPES)
