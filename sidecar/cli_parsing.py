"""The parts of the ``epochfs`` parser that are not commands: the argparse type made from a
settings parser, the options every command takes, ``--version`` and the commands' own parser class.

Apart from :mod:`.cli`, which declares the commands and runs them, because these change how
argparse reads and refuses a command line, whatever the commands are.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

import epochfs
from epochfs.sidecar.config import env_name
from epochfs.sidecar.logsettings import LOG_LEVEL_DEFAULT, LOG_LEVEL_FLAG, LOG_LEVELS


def arg_type(parse: Callable[[str], float]) -> Callable[[str], float]:
    """An argparse type from one of the settings' parsers: its reason in the usage error
    ("argument --interval: must be a finite number"), not the parser's name."""

    def typed(text: str) -> float:
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    return typed


def common_options() -> argparse.ArgumentParser:
    """Options of every command, accepted before the command and after it (after wins)."""
    common = argparse.ArgumentParser(add_help=False)
    # SUPPRESS: a sub-command that is not given the flag leaves the value given before it.
    common.add_argument(
        LOG_LEVEL_FLAG, dest="log_level", default=argparse.SUPPRESS, metavar="LEVEL",
        help=f"{', '.join(LOG_LEVELS)} (env {env_name(LOG_LEVEL_FLAG)}; "
             f"default {LOG_LEVEL_DEFAULT}); before or after the command",
    )
    return common


class VersionAction(argparse.Action):
    """``--version``: like argparse's own, but reads the version only when asked for it."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        print(f"epochfs {epochfs.__version__}")
        parser.exit()


class CommandParser(argparse.ArgumentParser):
    """A command's parser: it refuses an argument it does not know itself, with its own usage
    (``usage: epochfs sidecar ...``, ``epochfs sidecar: error: unrecognized arguments: --bogus``),
    where argparse hands the argument back to the top-level parser, which printed the top-level
    usage and named no command."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        ns, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return ns, extras


__all__ = ["CommandParser", "VersionAction", "arg_type", "common_options"]
