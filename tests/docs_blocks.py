"""The command lines the docs tell a user to type, read out of their Markdown code blocks.

tests/deploy/test_docs_commands.py classifies and runs them (issue 21, "Install": everything the docs
tell a user to type is run by a test); scripts/check-wheel.sh reads the README's install block with
it (stdlib only, so that script's plain python3 can import it).

A command block is a fenced block tagged ``sh``, ``bash``, ``shell`` or ``console``, or an untagged
one that either shows ``$ `` prompts or begins with a program (a word on PATH, a file of the
repository, or one of :data:`PROGRAMS`): untagged blocks also hold output and diagrams, and
docs/listing.md and docs/performance.md show commands in untagged blocks. In a block with ``$ ``
prompts only the prompted lines are commands (the rest is their output); in the others every line
is. Backslash continuations are joined, ``#`` comments dropped.

Indented code blocks (4 spaces past the text they sit in, after a blank line: :func:`indented_blocks`)
are read too: the docs show benchmark runs and reproductions in them (docs/performance.md,
docs/scale.md). Most of them hold output (epoch lines, tables, file trees, log lines, JSON), so there
a line is a command only where it has a ``$ `` prompt or names a program by :func:`names_program`,
which leaves PATH out: an output line whose first word happens to be a program on this machine
(``POST`` is one where libwww-perl is installed) must not become a command.
"""

from __future__ import annotations

import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```([A-Za-z]*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
SHELL_TAGS = frozenset({"sh", "bash", "shell", "console"})
PROMPT = "$ "
PROGRAMS = frozenset({"epochfs", "python", "python3", "pip", "make", "helm", "kubectl", "docker", "git",
                      "apt-get", "sudo", "nice", "curl", "dockerd"})
"""Programs that make an untagged block a command block even where they are not installed."""
ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


@dataclass(frozen=True)
class DocCommand:
    """One command line of a page: where it starts and its text (continuations joined, no prompt,
    no comment)."""

    page: str
    line: int
    text: str

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def command(self) -> str:
        """The text without leading ``VAR=value`` assignments and ``sudo``: what decides its class."""
        return strip_prefixes(self.text)


def strip_prefixes(text: str) -> str:
    """``text`` without its leading environment assignments, ``sudo`` and ``nice [-n N]`` (the
    program comes next)."""
    rest = text.strip()
    while True:
        word = _first_word(rest)
        if word is None or not (ASSIGNMENT.match(word) or word in ("sudo", "nice")):
            return rest
        rest = rest[_first_word_end(rest):].lstrip()
        if word == "nice" and _first_word(rest) == "-n":  # its niceness: the next word
            rest = rest[_first_word_end(rest):].lstrip()
            rest = rest[_first_word_end(rest):].lstrip()


def _first_word_end(text: str) -> int:
    """The end of the first shell word of ``text`` (quotes and ``$(...)`` kept inside it)."""
    quote = ""
    depth = 0
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "(" and text[i - 1:i] == "$":
            depth += 1
        elif ch == ")" and depth:
            depth -= 1
        elif ch.isspace() and not depth:
            return i
    return len(text)


def _first_word(text: str) -> str | None:
    return text[:_first_word_end(text)] or None


def drop_comment(line: str) -> str:
    """``line`` without a shell comment: ``#`` at the start of a word, outside quotes."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def is_program(word: str) -> bool:
    """A word a shell would run: a known program, one on PATH, or a file of the repository."""
    word = word.removeprefix(PROMPT)
    return word in PROGRAMS or shutil.which(word) is not None or ("/" in word and (ROOT / word).is_file())


def names_program(word: str) -> bool:
    """A word that names a program without asking PATH: one of :data:`PROGRAMS`, a path to one
    (``.venv/bin/python``), or a file of the repository (``scripts/check-wheel.sh``)."""
    word = word.removeprefix(PROMPT)
    return (word in PROGRAMS or ("/" in word and word.rsplit("/", 1)[1] in PROGRAMS)
            or ("/" in word and (ROOT / word).is_file()))


LIST_ITEM = re.compile(r"( *)(?:[-*+]|\d{1,9}[.)])( {1,4})(?=\S)")
"""A list item's first line: its content starts after the marker and the spaces after it."""


def indented_blocks(text: str) -> list[tuple[int, list[str]]]:
    """(first line number, lines with the code indent removed) of each indented code block.

    A line opens one when it follows a blank line and is indented 4 spaces past the content of the
    list item it sits in (past column 0 outside a list); the block runs while lines are that far
    in, or blank. Inside a list item a line only 4 in is its text, not code (``- item``, blank,
    ``    more text``); a line less far in than the item's content after a blank line ends the
    list. Fenced blocks are skipped whole (their continuation lines are indented too)."""
    blocks: list[tuple[int, list[str]]] = []
    content = 0  # the column the current list item's text starts at; 0 outside a list
    block: list[str] | None = None
    base = start = 0
    prev_blank = True
    fenced = False

    def close() -> None:
        nonlocal block
        if block is not None:
            while block and not block[-1].strip():
                block.pop()
            blocks.append((start, block))
        block = None

    for number, raw in enumerate(text.split("\n"), 1):
        line = raw.expandtabs(4)
        if line.startswith("```"):
            close()
            fenced, prev_blank, content = not fenced, False, 0
            continue
        if fenced:
            continue
        if not line.strip():
            if block is not None:
                block.append("")
            prev_blank = True
            continue
        indent = len(line) - len(line.lstrip(" "))
        if block is not None and indent >= base:
            block.append(line[base:])
            continue
        close()
        item = LIST_ITEM.match(line)
        if prev_blank and indent >= content + 4:
            block, base, start = [line[content + 4:]], content + 4, number
        elif item and len(item.group(1)) < content + 4:
            content = item.end()
        elif prev_blank and indent < content:
            content = 0  # the list ended
        prev_blank = False
    close()
    return blocks


def _is_command_block(tag: str, body: str) -> bool:
    if tag in SHELL_TAGS:
        return True
    if tag:
        return False
    lines = [line for line in body.splitlines() if line.strip()]
    if any(line.startswith(PROMPT) for line in lines):
        return True
    first = _first_word(strip_prefixes(lines[0])) if lines else None
    return first is not None and is_program(first)


def _block_commands(lines: list[str], first_line: int, page: str, *,
                    each_line: bool) -> list[DocCommand]:
    """The command lines of one block's lines; ``each_line``: only those with a prompt or a program
    (an indented block, mostly output), else every line, or every prompted one if any is."""
    prompted = any(line.startswith(PROMPT) for line in lines)
    found: list[DocCommand] = []
    i = 0
    while i < len(lines):
        start = i
        raw = lines[i]
        while raw.endswith("\\") and i + 1 < len(lines):  # a continuation: join the next line
            i += 1
            raw = raw[:-1].rstrip() + " " + lines[i].strip()
        i += 1
        if prompted:
            if not raw.startswith(PROMPT):
                continue  # output of the command above
            raw = raw[len(PROMPT):]
        command = drop_comment(raw).strip()
        if each_line and not prompted:
            first = _first_word(strip_prefixes(command))
            if first is None or not names_program(first):
                continue  # output, a tree, a table
        if command:
            found.append(DocCommand(page, first_line + start, command))
    return found


def commands_of(text: str, page: str) -> list[DocCommand]:
    """Every command line of the page's fenced command blocks and indented code blocks, in the
    page's order."""
    found: list[DocCommand] = []
    for fence in FENCE.finditer(text):
        tag, body = fence.group(1).lower(), fence.group(2)
        if _is_command_block(tag, body):
            first_line = text.count("\n", 0, fence.start(2)) + 1
            found += _block_commands(body.splitlines(), first_line, page, each_line=False)
    for first_line, lines in indented_blocks(text):
        found += _block_commands(lines, first_line, page, each_line=True)
    return sorted(found, key=lambda c: c.line)


def all_commands(pages: list[Path] = PAGES) -> list[DocCommand]:
    """The command lines of the README and of every page under docs/."""
    return [c for p in pages for c in commands_of(p.read_text(), str(p.relative_to(ROOT)))]


def words(command: str) -> list[str]:
    """The shell words of ``command`` (quotes removed, as the program receives them)."""
    return shlex.split(command)
