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
                      "apt-get", "sudo"})
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
    """``text`` without its leading environment assignments and ``sudo`` (the program comes next)."""
    rest = text.strip()
    while True:
        word = _first_word(rest)
        if word is None or not (ASSIGNMENT.match(word) or word == "sudo"):
            return rest
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


def commands_of(text: str, page: str) -> list[DocCommand]:
    """Every command line of the page's command blocks, in order."""
    found: list[DocCommand] = []
    for fence in FENCE.finditer(text):
        tag, body = fence.group(1).lower(), fence.group(2)
        if not _is_command_block(tag, body):
            continue
        first_line = text.count("\n", 0, fence.start(2)) + 1
        prompted = any(line.startswith(PROMPT) for line in body.splitlines())
        lines = body.splitlines()
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
            if command:
                found.append(DocCommand(page, first_line + start, command))
    return found


def all_commands(pages: list[Path] = PAGES) -> list[DocCommand]:
    """The command lines of the README and of every page under docs/."""
    return [c for p in pages for c in commands_of(p.read_text(), str(p.relative_to(ROOT)))]


def words(command: str) -> list[str]:
    """The shell words of ``command`` (quotes removed, as the program receives them)."""
    return shlex.split(command)
