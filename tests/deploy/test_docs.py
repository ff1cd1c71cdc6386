"""The docs a user follows are true (issue 21): every relative link of the README and of docs/
names a file of the repository, and every ``epochfs <command>`` they show is a command the CLI
has, with the flags it shows for it."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
from docs_blocks import indented_blocks

from epochfs.sidecar.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
COMMAND = re.compile(r"`epochfs ([a-z][a-z_-]*)((?: [^`]*)?)`")
FENCE = re.compile(r"^```[a-z]*\n(.*?)^```", re.S | re.M)
BLOCK_COMMAND = re.compile(r"^\s*(?:\$ )?epochfs ([a-z][a-z_-]*)(.*)$", re.M)


def _shown(text: str) -> list[tuple[str, str]]:
    """(command, the rest of its line) of every ``epochfs <command>`` in inline code and in code
    blocks, fenced and indented (continuation lines joined)."""
    found = COMMAND.findall(text)
    blocks = FENCE.findall(text) + ["\n".join(lines) + "\n" for _, lines in indented_blocks(text)]
    for block in blocks:
        found += BLOCK_COMMAND.findall(block.replace("\\\n", " "))
    return found


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_relative_links_name_files_that_exist(page: Path) -> None:
    dead = []
    for target in LINK.findall(page.read_text()):
        if "://" in target or target.startswith(("#", "mailto:")):
            continue
        path = target.split("#", 1)[0]
        if path and not (page.parent / path).exists():
            dead.append(target)
    assert not dead, f"{page.relative_to(ROOT)}: dead links {dead}"


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_the_commands_shown_are_the_clis_with_their_flags(page: Path) -> None:
    commands = _commands()
    wrong = []
    for name, rest in _shown(page.read_text()):
        if name not in commands:
            wrong.append(f"epochfs {name}: no such command")
            continue
        known = {opt for action in commands[name]._actions for opt in action.option_strings}
        own = rest.split(" --args ", 1)[0]  # what follows --args is the benchmark's
        for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", own):
            if flag not in known:
                wrong.append(f"epochfs {name} {flag}: no such flag")
    assert not wrong, f"{page.relative_to(ROOT)}: {sorted(set(wrong))}"


def test_a_dead_link_and_a_missing_command_would_be_found(tmp_path: Path) -> None:
    """The checks above can fail."""
    assert "nope" not in _commands() and "cut" in _commands()
    assert LINK.findall("see [x](docs/missing.md) and [y](https://e.x)") == ["docs/missing.md", "https://e.x"]
    assert COMMAND.findall("run `epochfs cut --cache DIR --nope`") == [("cut", " --cache DIR --nope")]
    block = "```sh\nepochfs sidecar --remote s3://b \\\n    --nope 1\n```\n"
    assert _shown(block) == [("sidecar", " --remote s3://b      --nope 1")]
    indented = "Run:\n\n    epochfs cut --cache DIR \\\n        --nope\n    epoch 0: 4 samples\n"
    assert _shown(indented) == [("cut", " --cache DIR      --nope")]


def test_the_readmes_commands_table_lists_every_command_of_the_cli() -> None:
    """The table under "## Commands" names each sub-command once, and no other (it listed 7 of 11,
    then 11 of 12: the webhook was missing)."""
    text = (ROOT / "README.md").read_text()
    table = text.split("## Commands", 1)[1].split("\n\n", 2)[1]
    rows = re.findall(r"^\| `epochfs ([a-z_-]+)", table, re.M)
    assert sorted(rows) == sorted(_commands()), rows


def test_no_page_points_at_a_file_outside_the_repository() -> None:
    """Not as a link and not as inline code either: ``../shared/DESIGN.md`` was named as the
    contract on two pages, a file no clone has."""
    outside = [(p.relative_to(ROOT), m) for p in PAGES
               for m in re.findall(r"`(\.\./[^`]+)`", p.read_text())
               if not (p.parent / m).resolve().is_relative_to(ROOT) or not (p.parent / m).exists()]
    assert not outside, outside


WORDS = re.compile(r"\b(pinned|headroom|turns? over|cut|cuts)\b", re.I)
"""The words of the README's glossary ("Words") a page may use: epoch is every page's subject."""
WORDS_LINE = re.compile(r"\[the README's Words\]\((?:\.\./)+README\.md#words\)")


def words_problems(page: str, text: str) -> list[str]:
    """Where a page uses a glossary word before it links to the README's Words (issue 21: "a short
    glossary (cut, epoch, pinned, headroom, turn over) before first use")."""
    used = WORDS.search(text)
    if used is None:
        return []
    link = WORDS_LINE.search(text)
    if link is None or text.rfind("\n", 0, link.start()) + 1 > used.start():  # its own line may name them
        line = text.count("\n", 0, used.start()) + 1
        return [f"{page}:{line}: {used.group(0)!r} before the link to the README's Words"]
    return []


@pytest.mark.parametrize("page", PAGES[1:], ids=[p.name for p in PAGES[1:]])
def test_a_page_links_to_the_glossary_before_it_uses_its_words(page: Path) -> None:
    assert words_problems(str(page.relative_to(ROOT)), page.read_text()) == []


def test_the_readme_defines_each_word_in_its_words_section_before_using_it() -> None:
    text = (ROOT / "README.md").read_text()
    section = text.index("### Words\n")
    for word in ("*epoch*", "*cut*", "*pinned*", "*Headroom*", "*turns over*"):
        assert word in text[section:section + 1500], word
    body = text[text.index("```", text.index("```") + 3) + 3:]  # after the first two commands
    first = WORDS.search(body)
    assert first is not None and body.index("### Words") < first.start(), first
    assert words_problems("made-up.md", "# T\n\nAn epoch is cut.\n") == [
        "made-up.md:3: 'cut' before the link to the README's Words"]
