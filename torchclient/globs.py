"""Which files to take: ``include``/``exclude`` globs over paths relative to the dataset's root.

One rule for the sidecar's ``--include``/``--exclude`` (applied to the remote's keys while
listing) and the loaders' ``include=``/``exclude=`` (applied to an epoch's file list), so the same
patterns mean the same files on both sides: a remote key *is* the file's path inside ``epoch-N/``.
Importable without torch (the sidecar reads it, as it reads :mod:`.layout`).

**The rule.** A path is kept when it matches at least one include pattern (or none is given) and
no exclude pattern. Patterns match the whole path, ``/``-separated, case-sensitively:

- ``*`` is any run of characters but ``/``; ``?`` one character but ``/``; ``[abc]``, ``[a-z]``,
  ``[!abc]`` a character of (not of) the set, never ``/`` (fnmatch's classes; no backslash escapes:
  ``[*]`` is a literal ``*``);
- ``**`` as a whole path component is any number of folders: ``**/x.json`` is ``x.json`` at any
  depth (the root included), ``a/**/b`` is ``a/b``, ``a/x/b``, ``a/x/y/b``..., and a trailing
  ``/**`` everything below (``train/**``: every file under ``train/``). ``**`` inside a component
  (``a**``) is refused;
- a pattern **without** ``/`` matches the file name at any depth (``*.npy`` is ``**/*.npy``:
  ``a.npy``, ``arrays/a.npy``, ``x/y/a.npy``), as in ``.gitignore``;
- a pattern **with** ``/`` matches from the root (``train/*.png`` is ``train/a.png``, not
  ``train/cat/a.png`` nor ``x/train/a.png``); a leading ``/`` anchors a name to the root
  (``/*.json``: the JSON files at the top only), a trailing ``/`` means everything below the
  folder (``train/`` is ``train/**``).

Examples: ``include="*.npy"`` keeps the ``.npy`` files anywhere; ``include="train/**"`` keeps what
is under ``train/``; ``exclude="**/*.json"`` (or ``"*.json"``) drops every JSON file;
``include="arrays/**,*.npz", exclude="*.tmp.npz"`` keeps ``arrays/`` and the ``.npz`` files
elsewhere, less the temporary ones.

**Lists.** A string is a comma-separated list of patterns (spaces around each are ignored; a
comma inside ``[...]`` belongs to the set), the form a flag and its ``EPOCHFS_*`` variable
carry; a list or tuple gives the patterns one by one, verbatim. An empty pattern, one holding a
NUL, an empty path component (``a//b``), a ``.`` or ``..`` component (no key has one: it could
never match) or ``**`` inside a component is refused up front (:class:`GlobError`, a
ValueError), never found out as an epoch with no files.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

__all__ = ["GlobError", "Globs", "KeyFilter", "glob_regex", "split_globs"]


class GlobError(ValueError):
    """A pattern that cannot be used (the message says which and why)."""


def split_globs(text: str) -> list[str]:
    """``"*.npy, train/**"`` -> ``["*.npy", "train/**"]``: split at the commas outside ``[...]``,
    spaces around each pattern dropped (an empty pattern is kept, for :func:`glob_regex` to refuse)."""
    out: list[str] = []
    current: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == ",":
            out.append("".join(current).strip())
            current = []
            i += 1
            continue
        if c == "[":
            end = _class_end(text, i)
            if end is not None:
                current.append(text[i:end + 1])
                i = end + 1
                continue
        current.append(c)
        i += 1
    out.append("".join(current).strip())
    return out


def _class_end(pattern: str, start: int) -> int | None:
    """The index of the ``]`` closing the set opened at ``pattern[start] == "["`` (fnmatch's rule:
    a ``]`` right after ``[`` or ``[!`` is a member), or None when it is not closed."""
    j = start + 1
    if j < len(pattern) and pattern[j] == "!":
        j += 1
    if j < len(pattern) and pattern[j] == "]":
        j += 1
    while j < len(pattern) and pattern[j] != "]":
        j += 1
    return j if j < len(pattern) else None


def _component(part: str, pattern: str) -> str:
    """The regex of one path component of ``pattern`` (no ``/`` in it)."""
    out: list[str] = []
    i, n = 0, len(part)
    while i < n:
        c = part[i]
        if c == "*":
            while i < n and part[i] == "*":
                i += 1
            out.append("[^/]*")
            continue
        if c == "?":
            out.append("[^/]")
        elif c == "[":
            end = _class_end(part, i)
            if end is None:
                out.append(re.escape(c))  # an unclosed [ is itself (as in fnmatch)
            else:
                members = part[i + 1:end]
                negate = members.startswith("!")
                if negate:
                    members = members[1:]
                members = members.replace("\\", "\\\\")
                members = re.sub(r"([&~|\[^])", r"\\\1", members)
                out.append(f"(?!/)[{'^' if negate else ''}{members}]")
                i = end + 1
                continue
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def glob_regex(pattern: str) -> str:
    """The regular expression (matched with ``fullmatch``) of one pattern; :class:`GlobError` for
    one that cannot be used (see the module doc)."""
    if not isinstance(pattern, str):
        raise GlobError(f"a pattern must be a string, got {pattern!r}")
    if not pattern:
        raise GlobError("an empty pattern")
    if "\x00" in pattern:
        raise GlobError(f"{pattern!r}: a pattern must not hold a NUL character")
    body = pattern
    anchored = body.startswith("/")
    if anchored:
        body = body[1:]
    if body.endswith("/"):
        body += "**"
    if not body:
        raise GlobError(f"{pattern!r}: names no file (use '**' for every file)")
    if not anchored and "/" not in body:
        body = "**/" + body
    parts = body.split("/")
    regex: list[str] = []
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part == "":
            raise GlobError(f"{pattern!r}: an empty path component ('//')")
        if part in (".", ".."):
            raise GlobError(f"{pattern!r}: a {part!r} component (keys have none, so it would match nothing)")
        if part == "**":
            regex.append(".+" if last else "(?:[^/]+/)*")
            continue
        if "**" in part:
            raise GlobError(f"{pattern!r}: '**' must be a whole path component "
                            "(as in train/**, **/*.json, a/**/b)")
        regex.append(_component(part, pattern) + ("" if last else "/"))
    source = "".join(regex)
    try:
        re.compile(source)
    except re.error as e:
        raise GlobError(f"{pattern!r}: not a valid pattern ({e.msg})") from None
    return source


class Globs(tuple[str, ...]):
    """Patterns as a setting holds them: checked, and written back (``str``) as the comma-separated
    list they were read from, so a flag passed on through its ``EPOCHFS_*`` variable reads the same."""

    __slots__ = ()

    @classmethod
    def parse(cls, text: str) -> Globs:
        """A comma-separated list (a flag's value); :class:`GlobError` names the bad pattern."""
        return cls.of(str(text))

    @classmethod
    def of(cls, patterns: str | Iterable[str]) -> Globs:
        """A comma-separated string, or patterns one by one (verbatim), each checked."""
        if isinstance(patterns, str):
            items = split_globs(patterns)
            if "" in items:
                where = ("" if patterns.strip() == ""
                         else f" in {patterns!r} (two commas in a row, or one at an end?)")
                raise GlobError(f"an empty pattern{where}")
        else:
            items = list(patterns)
        for p in items:
            glob_regex(p)
        return cls(items)

    def __str__(self) -> str:
        return ",".join(self)

    def __repr__(self) -> str:
        return f"Globs({list(self)!r})"


class KeyFilter:
    """``include``/``exclude`` patterns (each a comma-separated string, a sequence of patterns or
    None), checked at once; :meth:`keep` says whether a path is taken (the module doc's rule)."""

    def __init__(self, include: str | Iterable[str] | None = None,
                 exclude: str | Iterable[str] | None = None) -> None:
        self.include = self._patterns(include, "include")
        self.exclude = self._patterns(exclude, "exclude")
        self._include = self._compile(self.include)
        self._exclude = self._compile(self.exclude)

    @staticmethod
    def _patterns(value: str | Iterable[str] | None, what: str) -> Globs:
        if value is None:
            return Globs()
        if isinstance(value, (bytes, bytearray)) or not isinstance(value, (str, Iterable)):
            raise GlobError(f"{what}: a comma-separated string or a list of patterns, got {value!r}")
        try:
            return Globs.of(value)
        except GlobError as e:
            raise GlobError(f"{what}: {e}") from None

    @staticmethod
    def _compile(patterns: Globs) -> re.Pattern[str] | None:
        if not patterns:
            return None
        return re.compile("|".join(f"(?:{glob_regex(p)})" for p in patterns), re.DOTALL)

    def __bool__(self) -> bool:
        """Whether it leaves anything out (any pattern given)."""
        return bool(self.include or self.exclude)

    def keep(self, path: str) -> bool:
        """True when ``path`` (relative, ``/``-separated) matches an include (or there is none) and
        no exclude."""
        if self._include is not None and self._include.fullmatch(path) is None:
            return False
        return self._exclude is None or self._exclude.fullmatch(path) is None

    def describe(self) -> str:
        """The patterns in one canonical line (sorted, duplicates dropped; '' when none): what a
        cache records with its listing, so another set of patterns starts a new listing."""
        if not self:
            return ""
        return json.dumps({"include": sorted(set(self.include)), "exclude": sorted(set(self.exclude))},
                          separators=(",", ":"), ensure_ascii=False)

    def __repr__(self) -> str:
        return f"KeyFilter(include={list(self.include)!r}, exclude={list(self.exclude)!r})"
