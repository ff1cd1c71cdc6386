"""The log settings every epochfs command shares: ``--log-level`` (or ``EPOCHFS_LOG_LEVEL``) and
the format of the log lines.

Apart from :mod:`.config` because the level is no field of any settings class: it is one setting
of every command, read before the command's own settings (:mod:`.cli` declares the flag before
and after the command), and the format is that of every process's lines, the listing process's
too (one format in the pod's log).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from epochfs.sidecar.config import ConfigError, env_name

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LOG_LEVEL_FLAG = "--log-level"
LOG_LEVEL_DEFAULT = "INFO"
LOG_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"
"""Every epochfs process's log lines (the listing process's too: one format in the pod's log)."""


def resolve_log_level(flag_value: str | None, environ: Mapping[str, str] | None = None) -> str:
    """The level from ``--log-level``, else ``EPOCHFS_LOG_LEVEL`` (empty counts as unset), else
    INFO; names in any case. Anything else raises :class:`~.config.ConfigError` naming where it
    came from."""
    env = os.environ if environ is None else environ
    raw, source = flag_value, LOG_LEVEL_FLAG
    if raw is None and env.get(env_name(LOG_LEVEL_FLAG), "").strip():
        raw = env[env_name(LOG_LEVEL_FLAG)]
        source = f"{LOG_LEVEL_FLAG} (from {env_name(LOG_LEVEL_FLAG)})"
    if raw is None:
        return LOG_LEVEL_DEFAULT
    level = raw.strip().upper()
    if level not in LOG_LEVELS:
        raise ConfigError(f"{source}: unknown level {raw!r} (one of {', '.join(LOG_LEVELS)})")
    return level


__all__ = ["LOG_FORMAT", "LOG_LEVELS", "LOG_LEVEL_DEFAULT", "LOG_LEVEL_FLAG", "resolve_log_level"]
