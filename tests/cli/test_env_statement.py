"""The README's sentence on ``EPOCHFS_*`` variables, held to the real CLI (issue 21).

README.md's "Commands" section says, in one sentence, which flags also read an ``EPOCHFS_*``
variable and which take flags only. Nothing held that sentence to the parser, so a flag added,
moved or rewired could make it false unseen. This module reads the sentence itself
(:func:`parse_statement`), asks the real CLI what every flag of every command does with its
variable (:func:`reads_env`), and fails on any difference, a command or flag the sentence leaves
out included.

The sentence's grammar (anything else in it fails the parse, so a rewording that this module
would misread cannot pass unseen)::

    The flags of `CMD`, ... and `CMD`, `--FLAG` and `--FLAG` of `CMD` and `CMD`, and `--FLAG` of
    every command also read an `EPOCHFS_*` environment variable each (EXAMPLE); `CMD`'s `--FLAG`,
    ... and `--FLAG`, ..., and the other flags of `CMD`, `CMD` (but its `EPOCHFS_VAR`), ... and
    `CMD` take flags only.

(``the other flags of`` may be left out: the commands listed then take flags only for every flag,
"but its" variables apart.)

"What the CLI does" is found by running the real parser (``epochfs.sidecar.cli.build_parser``)
and the real resolution of settings (``config.from_args``, flag, else variable, else default; and
``logsettings.resolve_log_level``) with the variable set and unset, in this process; a flag *reads its
variable* when setting ``EPOCHFS_<FLAG>=V`` without the flag gives what ``--flag V`` gives, and
*takes flags only* when setting it gives what not setting it gives. Which settings a command
resolves is read from its handler's source (the ``config.from_args(config.XSettings, ns)`` call),
because calling the handler would start the command itself.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from typing import Any

import pytest
from common import ROOT

from epochfs.sidecar import cli, config, logsettings

README = ROOT / "README.md"

SENTENCE = re.compile(
    r"The flags of (?P<env>.*?) also read an `EPOCHFS_\*` environment variable each "
    r"\((?P<example>[^)]*)\); (?P<only>.*?) take flags only\.",
)
CMD = r"`[a-z]+`"
FLAG = r"`--[a-z-]+`"
SEP = r"(?:, |,? and )"
JOINS = r"(?:[, ]|and )*"
"""What is left between clauses once they are read: commas, spaces and "and"."""


def listed(item: str) -> str:
    """A regex for ``A``, ``A and B``, ``A, B and C`` (Oxford comma allowed) of ``item``."""
    return rf"{item}(?:{SEP}{item})*"


def names(text: str) -> list[str]:
    """The backquoted words of ``text``, quotes removed."""
    return re.findall(r"`([^`]+)`", text)


@dataclass
class Statement:
    """What the README's sentence says, per command."""

    env_all: set[str] = field(default_factory=set)
    """Commands whose every flag reads its variable ("The flags of `sidecar`")."""
    env_flags: dict[str, set[str]] = field(default_factory=dict)
    """Command -> the flags of it named as reading their variable ("`--cache` of `cut`")."""
    env_everywhere: set[str] = field(default_factory=set)
    """Flags that read their variable in every command ("`--log-level` of every command")."""
    only_flags: dict[str, set[str]] = field(default_factory=dict)
    """Command -> the flags of it named as taking flags only ("`cut`'s `--far`")."""
    only_all: set[str] = field(default_factory=set)
    """Commands all of whose flags take flags only ("and `status` take flags only")."""
    only_rest: set[str] = field(default_factory=set)
    """Commands whose flags not said to read a variable take flags only ("the other flags of")."""
    exceptions: dict[str, set[str]] = field(default_factory=dict)
    """Command -> the variables it reads all the same ("`index` (but its `EPOCHFS_X`)")."""
    example: str = ""

    def commands(self) -> set[str]:
        return (self.env_all | set(self.env_flags) | set(self.only_flags) | self.only_all
                | self.only_rest)

    def reads(self, command: str, flag: str) -> bool:
        """The sentence says the flag reads its variable."""
        return (command in self.env_all or flag in self.env_flags.get(command, set())
                or flag in self.env_everywhere
                or config.env_name(flag) in self.exceptions.get(command, set()))

    def flags_only(self, command: str, flag: str) -> bool:
        """The sentence says the flag takes flags only."""
        if config.env_name(flag) in self.exceptions.get(command, set()):
            return False
        return (flag in self.only_flags.get(command, set()) or command in self.only_all
                or (command in self.only_rest and not self.reads(command, flag)))

    def says(self, command: str, flag: str) -> bool | None:
        """True: reads its variable; False: takes flags only; None: the sentence does not say
        (or says both: :func:`mismatches` reports that)."""
        reads, only = self.reads(command, flag), self.flags_only(command, flag)
        return None if reads == only else reads


def _consume(text: str, clause: str, on_match: Callable[[re.Match[str]], None]) -> str:
    """Call ``on_match`` for each ``clause`` in ``text``; return the text with the clauses removed."""
    for m in re.finditer(clause, text):
        on_match(m)
    return re.sub(clause, "", text)


def parse_statement(readme: str) -> Statement:
    """The sentence of ``readme`` as a :class:`Statement`; AssertionError if it is missing or holds
    words outside the grammar of the module's docstring."""
    m = SENTENCE.search(" ".join(readme.split()))  # the sentence's line breaks are spaces
    assert m, "README.md: no sentence 'The flags of ... also read an `EPOCHFS_*` ... take flags only.'"
    st = Statement(example=m["example"])

    def some_flags(c: re.Match[str]) -> None:
        flags = names(c["flags"])
        if c["cmds"] == "every command":
            st.env_everywhere.update(flags)
        for command in names(c["cmds"]):
            st.env_flags.setdefault(command, set()).update(flags)

    rest = _consume(m["env"], rf"(?P<flags>{listed(FLAG)}) of (?P<cmds>{listed(CMD)}|every command)",
                    some_flags)
    lead = re.fullmatch(rf"(?P<cmds>{listed(CMD)}){JOINS}", rest)
    assert lead, f"README.md: words outside the grammar in the variables' part: {rest!r}"
    st.env_all.update(names(lead["cmds"]))

    def own_flags(c: re.Match[str]) -> None:
        st.only_flags.setdefault(c["cmd"], set()).update(names(c["flags"]))

    rest = _consume(m["only"], rf"`(?P<cmd>[a-z]+)`'s (?P<flags>{listed(FLAG)})", own_flags)
    item = rf"{CMD}(?: \(but its {listed('`EPOCHFS_[A-Z_]+`')}\))?"
    others = re.fullmatch(rf"{JOINS}(?:(?P<other>the other flags of )?(?P<cmds>{listed(item)}))?", rest)
    assert others, f"README.md: words outside the grammar in the flags-only part: {rest!r}"
    for c in re.finditer(r"`(?P<cmd>[a-z]+)`(?: \(but its (?P<vars>[^)]*)\))?", others["cmds"] or ""):
        (st.only_rest if others["other"] else st.only_all).add(c["cmd"])
        if c["vars"]:
            st.exceptions.setdefault(c["cmd"], set()).update(names(c["vars"]))
    return st


# ---- what the CLI does --------------------------------------------------------------------------

VALUES: dict[str, tuple[str, str]] = {
    # Two values each flag accepts, both unlike the default where it has one (valid together with
    # every other flag of its command at its first value).
    "--args": ("--v", "--w"),
    "--cache": ("/nonexistent/epochfs-v", "/nonexistent/epochfs-w"),
    "--capacity": ("3Gi", "5Gi"),
    "--concurrency": ("3", "5"),
    "--cut-interval": ("7", "9"),
    "--direct-writes": ("0", "1"),
    "--endpoint-url": ("http://v.invalid", "http://w.invalid"),
    "--epoch": ("3", "5"),
    "--exclude": ("*.tmp", "*.json"),
    "--fuse-api": ("highlevel", "lowlevel"),
    "--headroom": ("0.3", "0.4"),
    "--health-port": ("8081", "8082"),
    "--host": ("127.0.0.2", "127.0.0.3"),
    "--in-use-seconds": ("7", "9"),
    "--retire-grace": ("3", "7"),
    "--include": ("*.npy", "train/**"),
    "--index": ("file:///v.txt", "file:///w.txt"),
    "--interval": ("3", "5"),
    "--answer-timeout": ("3", "5"),
    "--keep-epochs": ("3", "5"),
    "--kube-error-threshold": ("3", "5"),
    "--kube-reporting": ("0", "1"),
    "--kube-status-interval": ("7", "9"),
    "--link-root": ("/v", "/w"),
    "--list-process": ("0", "1"),
    "--list-threads": ("3", "5"),
    "--log-level": ("DEBUG", "ERROR"),
    "--max-object-size": ("1Mi", "2Mi"),
    "--max-rate": ("1Mi", "2Mi"),
    "--metrics-port": ("9091", "9092"),
    "--min-samples": ("3", "5"),
    "--mount": ("/nonexistent/epochfs-mnt-v", "/nonexistent/epochfs-mnt-w"),
    "--order": ("sorted", "shuffled"),
    "--out": ("/nonexistent/v.idx", "/nonexistent/w.idx"),
    "--port": ("8444", "8445"),
    "--profiles": ("/v", "/w"),
    "--progress-seconds": ("7", "9"),
    "--read-timeout": ("7", "9"),
    "--relist-interval": ("7", "9"),
    "--remote": ("file:///v", "file:///w"),
    "--retries": ("3", "5"),
    "--schedule": ("initial=10,growth=2", "initial=20,growth=3"),
    "--scrub-rate": ("1Mi", "2Mi"),
    "--seed": ("3", "5"),
    "--shard-count": ("4", "6"),
    "--shard-index": ("1", "2"),
    "--termination-log": ("/v.log", "/w.log"),
    "--tls-cert": ("/v.pem", "/w.pem"),
    "--tls-key": ("/v.key", "/w.key"),
    "--view": ("folder", "fuse"),
    "--warm-files": ("3", "5"),
}
POSITIONALS = {"remote": "file:///data"}
"""Values of the required positional arguments (``index REMOTE``)."""
SWITCH_ON = "1"
"""What ``EPOCHFS_<FLAG>`` is set to for a switch (a flag that takes no value: ``--force``)."""


def command_parsers() -> dict[str, Any]:
    """Command name -> its argparse parser, from the real CLI."""
    sub = next(a for a in cli.build_parser()._actions if a.dest == "command")
    return dict(sub.choices or {})


def flags_of(parser: Any) -> dict[str, Any]:
    """A command's flags (but --help) -> their argparse actions."""
    return {a.option_strings[-1]: a for a in parser._actions
            if a.option_strings and a.option_strings[-1].startswith("--")
            and a.option_strings[-1] != "--help"}


def is_switch(action: Any) -> bool:
    return bool(action.nargs == 0)


def chunk(flag: str, action: Any, which: int = 0) -> list[str]:
    """``flag`` on a command line, at its first (0) or second (1) value of :data:`VALUES`."""
    if is_switch(action):
        return [flag]
    assert flag in VALUES, f"{flag}: a flag new to this module; give it two values in VALUES"
    return [flag, VALUES[flag][which]]


def settings_class(handler: Callable[..., Any]) -> type[config.CacheSettings] | None:
    """The settings class a command's handler resolves with ``config.from_args`` (None: none)."""
    found = set(re.findall(r"config\.from_args\(config\.(\w+),", inspect.getsource(handler)))
    assert len(found) <= 1, f"{handler.__name__} resolves more than one settings class: {found}"
    return getattr(config, found.pop()) if found else None


@contextlib.contextmanager
def environment(env: dict[str, str]) -> Iterator[None]:
    """``os.environ`` with every ``EPOCHFS_*`` variable removed, then ``env`` set; restored after."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("EPOCHFS_")}
    for k in saved:
        del os.environ[k]
    os.environ.update(env)
    try:
        yield
    finally:
        for k in env:
            os.environ.pop(k, None)
        os.environ.update(saved)


Outcome = dict[str, Any] | str
_PARSERS: dict[frozenset[tuple[str, str]], Any] = {}


def parser_in(env: dict[str, str]) -> Any:
    """The real parser, built in ``env`` (``index`` reads a default from the environment while
    it is built); one per environment, as building one takes a while and parsing leaves it as is."""
    key = frozenset(env.items())
    if key not in _PARSERS:
        _PARSERS[key] = cli.build_parser()
    return _PARSERS[key]


def outcome(command: str, argv: list[str], env: dict[str, str]) -> Outcome:
    """What ``epochfs COMMAND ARGV`` acts on with ``env``: the parsed values, each setting replaced
    by its resolved value (flag, else variable, else default) and the log level resolved; or the
    refusal (a usage error or the settings' ConfigError)."""
    with environment(env):
        parser = parser_in(env)
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                ns = parser.parse_args([command, *argv])
        except SystemExit:
            return "usage error"
        values = {k: v for k, v in vars(ns).items() if k != "func"}
        try:
            cls = settings_class(ns.func)
            if cls is not None:
                settings = config.from_args(cls, ns)
                values.update({f.name: getattr(settings, f.name) for f in fields(cls)})
            values["log_level"] = logsettings.resolve_log_level(getattr(ns, "log_level", None))
        except config.ConfigError as e:
            return f"refused: {e}"
    return values


def command_line(parser: Any, flag: str, tried: list[str]) -> list[str]:
    """``tried`` (``flag`` at some value, or nothing) among every other flag of the command at its
    first value, and its positionals: what the command line holds while ``flag`` is tried. Of a
    mutually exclusive group, only the first member (none when ``flag`` is in the group); a flag
    that takes the rest of the line (``bench --args``) goes last."""
    skip = {flag}
    for group in parser._mutually_exclusive_groups:
        members = [a.option_strings[-1] for a in group._group_actions]
        skip.update(members if flag in members else members[1:])
    argv: list[str] = []
    last: list[str] = []
    for f, action in flags_of(parser).items():
        if f not in skip:
            (last if action.nargs == "..." else argv).extend(chunk(f, action))
    positionals = [POSITIONALS[a.dest] for a in parser._actions
                   if not a.option_strings and a.required and a.nargs is None]
    return positionals + argv + tried + last


@dataclass(frozen=True)
class Observed:
    """What one flag of one command does with its variable."""

    reads: bool | None
    """True: reads it; False: ignores it; None: neither (the variable gave a third result)."""
    flag_wins: bool
    """Given too, the flag's value is used, not the variable's (True where ``reads`` is not)."""
    flag_matters: bool
    """The flag changes what the command acts on (else the check above could not fail)."""


def reads_env(command: str, flag: str, parser: Any) -> Observed:
    """Try ``EPOCHFS_<FLAG>`` on ``command``: unset, set without the flag, set with the flag."""
    action = flags_of(parser)[flag]
    var = config.env_name(flag)
    value = SWITCH_ON if is_switch(action) else VALUES[flag][0]

    def line(which: int | None) -> list[str]:
        return command_line(parser, flag, [] if which is None else chunk(flag, action, which))

    unset = outcome(command, line(None), {})
    given = outcome(command, line(0), {})
    from_env = outcome(command, line(None), {var: value})
    reads = True if from_env == given else False if from_env == unset else None
    flag_wins = True
    if reads and not is_switch(action):
        both = outcome(command, line(1), {var: value})
        flag_wins = both == outcome(command, line(1), {}) and both != given
    return Observed(reads=reads, flag_wins=flag_wins, flag_matters=given != unset)


def observe_cli() -> dict[tuple[str, str], Observed]:
    """Every (command, flag) of the real CLI -> :class:`Observed`."""
    return {(command, flag): reads_env(command, flag, parser)
            for command, parser in command_parsers().items() for flag in flags_of(parser)}


def mismatches(st: Statement, observed: dict[tuple[str, str], Observed]) -> list[str]:
    """Every way the statement and the CLI differ, one line each (empty: they agree)."""
    out = []
    commands = {c for c, _ in observed}
    out += [f"`{c}`: a command the README's sentence does not name" for c in sorted(commands - st.commands())]
    out += [f"`{c}`: the README's sentence names it; the CLI has no such command"
            for c in sorted(st.commands() - commands)]
    named = [(c, f) for c, fs in (*st.env_flags.items(), *st.only_flags.items()) for f in fs]
    named += [(c, f) for c in commands for f in st.env_everywhere]
    out += [f"`{c} {f}`: the README names it; the command has no such flag"
            for c, f in sorted(set(named)) if c in commands and (c, f) not in observed]
    for c, variables in sorted(st.exceptions.items()):
        flags = {config.env_name(f): f for (cc, f) in observed if cc == c}
        out += [f"`{c}`: the README says it reads `{v}`; it has no flag of that name"
                for v in sorted(variables - set(flags))]
    for (c, f), seen in sorted(observed.items()):
        var, said = config.env_name(f), st.says(c, f)
        if said is None and st.reads(c, f):
            out.append(f"`{c} {f}`: the README says both that it reads {var} and that it takes flags only")
        elif said is None:
            out.append(f"`{c} {f}`: the README's sentence does not say whether it reads {var}")
        elif seen.reads is None:
            out.append(f"`{c} {f}`: {var} gives neither the flag's value nor nothing")
        elif said != seen.reads:
            out.append(f"`{c} {f}`: the README says it {'reads' if said else 'ignores'} {var}; "
                       f"the CLI {'reads' if seen.reads else 'ignores'} it")
    return out


@pytest.fixture(scope="module")
def observed() -> dict[tuple[str, str], Observed]:
    return observe_cli()


def readme_text() -> str:
    return README.read_text()


def test_every_flag_has_two_values_that_change_what_its_command_does(
        observed: dict[tuple[str, str], Observed]) -> None:
    """Else a flag's check could not fail: given or not, the command would act the same."""
    assert [k for k, seen in observed.items() if not seen.flag_matters] == []


def test_a_flag_beats_its_variable(observed: dict[tuple[str, str], Observed]) -> None:
    """Given both, the flag's value is used (the README: "flags win")."""
    assert [k for k, seen in observed.items() if not seen.flag_wins] == []


def test_the_readme_example_is_the_cli_naming() -> None:
    st = parse_statement(readme_text())
    for flag, var in re.findall(r"`(--[a-z-]+)` → `(EPOCHFS_[A-Z_]+)`", st.example):
        assert config.env_name(flag) == var
    assert "flags win" in st.example


def test_the_readme_sentence_on_environment_variables_is_what_the_cli_does(
        observed: dict[tuple[str, str], Observed]) -> None:
    st = parse_statement(readme_text())
    assert mismatches(st, observed) == []
    # The sentence is read as meant: spot checks of each of its clauses.
    assert st.says("sidecar", "--shard-index") is True
    assert st.says("cut", "--cache") is True and st.says("cut", "--far") is False
    assert st.says("status", "--log-level") is True and st.says("status", "--json") is False
    assert st.says("index", "--endpoint-url") is True and st.says("index", "--out") is False


BEFORE_THE_FIX = (
    "The flags of `sidecar`, `sample`, `mount`, `publish` and `relist`, and `--cache` and `--log-level`\n"
    "of `cut` and `verify`, also read an `EPOCHFS_*` environment variable each\n"
    "(`--shard-index` → `EPOCHFS_SHARD_INDEX`; flags win; the chart sets them this way); `cut`'s\n"
    "`--epoch`, `--force` and `--far`, `verify`'s `--json`, `--report-only` and `--progress-seconds`, and\n"
    "`status`, `unmount`, `index` (but its `EPOCHFS_ENDPOINT_URL`), `webhook` and `bench` take flags\n"
    "only."
)
"""The sentence as the README had it before this test: it said ``status``'s and the other
flags-only commands' ``--log-level`` take flags only, where every command reads EPOCHFS_LOG_LEVEL,
and its last clause did not say "the other flags of"."""


def drifted(old: str, new: str) -> str:
    """The README with its first ``old`` (line breaks read as spaces) made ``new``."""
    text = " ".join(readme_text().split())
    assert old in text, f"the README no longer holds {old!r}: update this drift"
    return text.replace(old, new, 1)


@pytest.mark.parametrize(("readme", "caught"), [
    pytest.param(lambda: drifted("`publish` and `relist`,", "`publish`,"),
                 "`relist --cache`: the README's sentence does not say", id="a command left out"),
    pytest.param(lambda: drifted("`publish` and `relist`,", "`publish`,").replace(
        "the other flags of `status`", "the other flags of `relist`, `status`"),
                 "`relist --cache`: the README says it ignores EPOCHFS_CACHE; the CLI reads it",
                 id="a command moved to flags only"),
    pytest.param(lambda: drifted("`--force` and `--far`", "`--force`"),
                 "`cut --far`: the README's sentence does not say", id="a flag left out"),
    pytest.param(lambda: drifted(" (but its `EPOCHFS_ENDPOINT_URL`)", ""),
                 "`index --endpoint-url`: the README says it ignores", id="the exception dropped"),
    pytest.param(lambda: drifted("`verify`'s `--json`", "`verify`'s `--cache`, `--json`"),
                 "`verify --cache`: the README says both", id="a flag said both ways"),
    pytest.param(lambda: drifted("`webhook` and `bench`", "`webhook`, `bench` and `serve`"),
                 "`serve`: the README's sentence names it; the CLI has no such command",
                 id="a command the CLI lacks"),
    pytest.param(lambda: BEFORE_THE_FIX, "`status --log-level`: the README says it ignores EPOCHFS_LOG_LEVEL",
                 id="the sentence before this test"),
])
def test_a_drift_between_the_readme_and_the_cli_is_caught(
        readme: Callable[[], str], caught: str, observed: dict[tuple[str, str], Observed]) -> None:
    found = mismatches(parse_statement(readme()), observed)
    assert any(line.startswith(caught) for line in found), found


@pytest.mark.parametrize("sentence", [
    "The flags of `sidecar` and, roughly, `sample` also read an `EPOCHFS_*` environment variable each "
    "(x); `cut`'s `--far` take flags only.",
    "The flags of `sidecar` also read an `EPOCHFS_*` environment variable each (x); `cut`'s `--far`, "
    "and mostly the other flags of `status` take flags only.",
])
def test_words_outside_the_grammar_fail_the_parse(sentence: str) -> None:
    """A rewording this module would misread fails loudly instead of passing unseen."""
    with pytest.raises(AssertionError, match=r"README\.md"):
        parse_statement(sentence)


def test_the_check_tells_a_plain_flag_from_a_setting() -> None:
    """The CLI side can fail too: ``status``'s ``--cache`` is a plain argparse flag and is seen as
    ignoring EPOCHFS_CACHE; ``relist``'s is a setting and is seen reading it; were ``relist``
    rewired like ``status``, the sentence (which says it reads it) would no longer match."""
    parsers = command_parsers()
    assert reads_env("status", "--cache", parsers["status"]).reads is False
    assert reads_env("relist", "--cache", parsers["relist"]).reads is True
