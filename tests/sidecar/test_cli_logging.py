"""The CLI's global options and its exit: ``--log-level`` before or after the command, or
``EPOCHFS_LOG_LEVEL``, validated (exit 2 naming the bad value), in ``--help``; and output cut short
by a closed pipe (``epochfs status | head``) ends quietly with status 141, not a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from epochfs.sidecar import cli
from epochfs.sidecar.store import Store

EPOCHFS = [sys.executable, "-m", "epochfs.sidecar.cli"]

# Runs the real main() with one command replaced by a probe that prints the root logger's level.
PROBE = """
import logging, sys
from epochfs.sidecar import cli
cli._cmd_unmount = lambda ns: print(logging.getLevelName(logging.getLogger().getEffectiveLevel()))
sys.exit(cli.main(sys.argv[1:]))
"""


def _env(level: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "EPOCHFS_LOG_LEVEL"}
    if level is not None:
        env["EPOCHFS_LOG_LEVEL"] = level
    return env


def probe(*args: str, env_level: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True,
                          timeout=60, env=_env(env_level))


@pytest.mark.parametrize("args,env_level,expected", [
    ((), None, "INFO"),
    (("--log-level", "DEBUG"), None, "DEBUG"),            # before the command, as before
    ((), "warning", "WARNING"),                          # the environment, any case
    (("--log-level", "error"), "DEBUG", "ERROR"),        # the flag wins over the environment
    ((), "", "INFO"),                                    # an empty variable counts as unset
], ids=["default", "before", "env", "flag-over-env", "empty-env"])
def test_log_level_before_the_command_or_from_the_environment(
    args: tuple[str, ...], env_level: str | None, expected: str
) -> None:
    result = probe(*args, "unmount", "--mount", "/nonexistent", env_level=env_level)
    assert (result.returncode, result.stdout.strip()) == (0, expected), result.stderr


@pytest.mark.parametrize("args,expected", [
    (("unmount", "--mount", "/x", "--log-level", "DEBUG"), "DEBUG"),
    (("unmount", "--log-level", "critical", "--mount", "/x"), "CRITICAL"),
    (("--log-level", "ERROR", "unmount", "--mount", "/x", "--log-level", "DEBUG"), "DEBUG"),
], ids=["after", "between-flags", "after-wins"])
def test_log_level_after_the_command(args: tuple[str, ...], expected: str) -> None:
    result = probe(*args, env_level="WARNING")
    assert (result.returncode, result.stdout.strip()) == (0, expected), result.stderr


@pytest.mark.parametrize("args,env_level,source", [
    (("status", "--cache", "/nonexistent", "--log-level", "LOUD"), None, "--log-level:"),
    (("--log-level", "LOUD", "status", "--cache", "/nonexistent"), None, "--log-level:"),
    (("status", "--cache", "/nonexistent"), "LOUD", "--log-level (from EPOCHFS_LOG_LEVEL):"),
], ids=["flag-after", "flag-before", "env"])
def test_a_bad_level_exits_2_naming_it(args: tuple[str, ...], env_level: str | None, source: str) -> None:
    result = subprocess.run([*EPOCHFS, *args], capture_output=True, text=True, timeout=60,
                            env=_env(env_level))
    assert result.returncode == 2 and result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith(f"epochfs status: {source} unknown level 'LOUD'"), line
    assert "DEBUG, INFO, WARNING, ERROR, CRITICAL" in line


COMMANDS = sorted(next(a for a in cli.build_parser()._actions if a.dest == "command").choices or ())


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_names_the_flag_and_the_variable(
    command: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.build_parser().parse_args([command, "--help"] if command else ["--help"])
    assert exit_.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--log-level LEVEL" in text and "EPOCHFS_LOG_LEVEL" in text and "after the command" in text


def _into_closed_pipe(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the console entry with stdout a pipe whose reader has already gone."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([*EPOCHFS, *args], stdout=write_end, stderr=subprocess.PIPE, text=True,
                              timeout=60, env=_env(None))
    finally:
        os.close(write_end)


def test_status_into_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    with Store(tmp_path / "cache", create=True):
        pass
    result = _into_closed_pipe("status", "--cache", str(tmp_path / "cache"))
    assert result.stderr == "" and result.returncode == cli.SIGPIPE_STATUS == 141
    assert _into_closed_pipe("--help").stderr == ""


def test_status_piped_into_head(tmp_path: Path) -> None:
    """What a person types: the first line arrives, and nothing else is printed."""
    with Store(tmp_path / "cache", create=True):
        pass
    command = " ".join([*EPOCHFS, "status", "--cache", str(tmp_path / "cache")])
    result = subprocess.run(["bash", "-c", f"set -o pipefail; {command} | head -n 1"], capture_output=True,
                            text=True, timeout=60, env=_env(None))
    assert result.stdout.startswith("cache ") and result.stdout.count("\n") == 1
    assert result.stderr == "" and result.returncode in (0, 141)


def test_a_broken_pipe_that_is_not_stdout_is_not_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(ns: object) -> int:
        raise BrokenPipeError(32, "Broken pipe")  # as a socket write to a gone peer would

    monkeypatch.setattr(cli, "_cmd_unmount", boom)
    with pytest.raises(BrokenPipeError):
        cli.main(["unmount", "--mount", "/nonexistent"])
