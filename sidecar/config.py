"""Typed settings for every epochfs command, from flags and ``EPOCHFS_*`` environment variables.

Each field is declared once, with its flag, type, default and a line of doc; the argparse parser,
the environment lookup and the docs (``epochfs <cmd> --help``) all come from that declaration.
Flags win over the environment, the environment over defaults. Invalid values raise
:class:`ConfigError` naming the flag; the CLI turns it into one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlparse

from epochfs.sidecar.store import Policy, Schedule

REMOTE_SCHEMES = ("s3", "gs", "gcs", "http", "https", "file")

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "m": 1000**2,
    "g": 1000**3,
    "t": 1000**4,
    "p": 1000**5,
    "ki": 1024,
    "mi": 1024**2,
    "gi": 1024**3,
    "ti": 1024**4,
    "pi": 1024**5,
}
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kmgtp]?i?)b?\s*$", re.IGNORECASE)


class ConfigError(ValueError):
    """A bad flag or environment value; the message names the flag."""


def parse_size(text: str) -> int:
    """Parse ``500Mi``, ``20Gi``, ``1.5T``, ``4096`` into bytes (binary and decimal units)."""
    m = _SIZE_RE.match(str(text))
    if not m:
        raise ValueError(f"not a size: {text!r} (examples: 500Mi, 20Gi, 1.5T, 4096)")
    number, unit = float(m.group(1)), m.group(2).lower()
    if unit not in _UNITS:
        raise ValueError(f"unknown unit in {text!r}")
    return int(number * _UNITS[unit])


def format_size(n: float) -> str:
    """Human size with binary units, for status lines."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _opt(
    flag: str,
    doc: str,
    *,
    default: Any = None,
    parse: Callable[[str], Any] = str,
    required: bool = False,
) -> Any:
    return field(
        default=default,
        metadata={"flag": flag, "doc": doc, "parse": parse, "required": required},
    )


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError("must be at least 1")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError("must not be negative")
    return value


def _fraction(text: str) -> float:
    value = float(text)
    if not 0.0 <= value < 1.0:
        raise ValueError("must be in [0, 1)")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise ValueError("must be positive")
    return value


def _switch(text: str) -> bool:
    value = str(text).strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"must be 1/0, true/false, yes/no or on/off, got {text!r}")


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise ValueError("must be a TCP port (0-65535)")
    return value


def _rate(text: str) -> int:
    """A byte rate such as ``8Mi`` (per second); 0 turns the feature off."""
    if str(text).strip().startswith("-"):
        raise ValueError("must not be negative")
    return parse_size(text)


def _capacity(text: str) -> int:
    if str(text).strip().startswith("-"):
        raise ValueError("must not be negative")
    value = parse_size(text)
    if value <= 0:
        raise ValueError("must be positive")
    return value


def _schedule(text: str) -> Schedule | None:
    return Schedule.parse(text) if text else None


VIEWS = ("fuse", "folder")


def _view(text: str) -> str:
    value = str(text).strip().lower()
    if value not in VIEWS:
        raise ValueError(f"must be one of {', '.join(VIEWS)}, got {text!r}")
    return value


def _remote(text: str) -> str:
    url = text.strip()
    if not url:
        raise ValueError("must not be empty")
    scheme = urlparse(url).scheme.lower()
    if scheme == "":
        raise ValueError(f"needs a scheme ({', '.join(s + '://' for s in REMOTE_SCHEMES)}): {url!r}")
    if scheme not in REMOTE_SCHEMES:
        raise ValueError(f"unknown URL scheme {scheme!r} (known: {', '.join(REMOTE_SCHEMES)})")
    return url


@dataclass(frozen=True)
class CacheSettings:
    """Where the node cache lives."""

    cache: Path = _opt("--cache", "cache directory on the node volume", parse=Path, required=True)

    def validate(self) -> None:
        if self.cache.exists() and not self.cache.is_dir():
            raise ConfigError(f"--cache: {self.cache} exists and is not a directory")


@dataclass(frozen=True)
class SamplerSettings(CacheSettings):
    """What to sample, how fast, and the cache rules (``epochfs sample`` and ``epochfs sidecar``)."""

    remote: str = _opt("--remote", "dataset URL: s3://, gs://, https:// (index file), file://",
                       parse=_remote, required=True)
    capacity: int = _opt("--capacity", "cache byte budget, e.g. 500Mi, 20Gi, 1.5T",
                         default=10 * 1024**3, parse=_capacity)
    seed: int = _opt("--seed", "seed of the sampling order (same seed, same order)", default=0, parse=int)
    shard_index: int = _opt("--shard-index", "this node's shard (0-based)", default=0,
                            parse=_non_negative_int)
    shard_count: int = _opt("--shard-count", "number of shards (nodes)", default=1, parse=_positive_int)
    concurrency: int = _opt("--concurrency", "downloads in flight", default=32, parse=_positive_int)
    endpoint_url: str | None = _opt("--endpoint-url", "S3-compatible endpoint (AWS_* credentials honoured)")
    min_samples: int = _opt("--min-samples", "complete samples needed before epoch 0 can be cut",
                            default=1, parse=_positive_int)
    keep_epochs: int = _opt("--keep-epochs", "newest epochs kept pinned", default=2, parse=_positive_int)
    max_object_size: int | None = _opt("--max-object-size",
                                       "skip objects larger than this (default: what an epoch can hold)",
                                       parse=_capacity)
    schedule: Schedule | None = _opt("--schedule", "schedule mode, e.g. initial=1000,growth=1.5",
                                     parse=_schedule)
    headroom: float = _opt("--headroom", "share of capacity kept free of epochs for new samples",
                           default=0.25, parse=_fraction)
    retries: int = _opt("--retries", "attempts per object before it is skipped", default=5,
                        parse=_positive_int)
    index_url: str | None = _opt("--index", "for http(s) remotes: URL of the index file listing keys")
    in_use_seconds: float = _opt("--in-use-seconds",
                                 "an epoch looked up this recently stays pinned beyond --keep-epochs",
                                 default=600.0, parse=float)
    max_rate: int | None = _opt("--max-rate", "limit on download bytes per second, e.g. 50Mi (default: none)",
                                parse=_capacity)
    cut_interval: float = _opt("--cut-interval", "cut a new epoch every N seconds (0: only on request)",
                               default=0.0, parse=float)
    read_timeout: float = _opt("--read-timeout",
                               "seconds of silence before a download counts as stalled and is retried",
                               default=30.0, parse=_positive_float)
    progress_seconds: float = _opt("--progress-seconds", "seconds between the sampler's progress lines",
                                   default=5.0, parse=_positive_float)
    scrub_rate: int = _opt("--scrub-rate",
                           "bytes per second the background scrub reads to check cached objects against "
                           "their md5, evicting and fetching again damaged ones (0: no scrub)",
                           default=8 * 1024**2, parse=_rate)

    def policy(self) -> Policy:
        """The cache rules these settings give, as the store records them."""
        return Policy(capacity=self.capacity, keep_epochs=self.keep_epochs, min_samples=self.min_samples,
                      headroom=self.headroom, in_use_seconds=self.in_use_seconds, schedule=self.schedule)

    @property
    def object_limit(self) -> int:
        """Largest object fetched: --max-object-size, or what one epoch may hold."""
        budget = self.policy().epoch_budget
        return budget if self.max_object_size is None else min(self.max_object_size, budget)

    def validate(self) -> None:
        super().validate()
        if self.shard_index >= self.shard_count:
            raise ConfigError(
                f"--shard-index: {self.shard_index} must be below --shard-count {self.shard_count}"
            )
        if self.max_object_size is not None and self.capacity < self.max_object_size:
            raise ConfigError(
                f"--capacity: {format_size(self.capacity)} is smaller than --max-object-size "
                f"{format_size(self.max_object_size)}"
            )


WARM_HELP = "most symlinks of a new epoch warmed in the kernel's cache (0: no warm-up)"
MOUNT_HELP = ("where the view is mounted: an empty folder, created if missing; in a pod a subdirectory "
              "of the shared volume, never the volume's own mount point")


@dataclass(frozen=True)
class MountSettings(CacheSettings):
    """The read-only FUSE view (``epochfs mount``)."""

    mount: Path = _opt("--mount", MOUNT_HELP, parse=Path, required=True)
    link_root: Path | None = _opt(
        "--link-root",
        "read-only path to the objects folder that epoch symlinks point into "
        "(default: a read-only bind mount made under the cache)",
        parse=Path,
    )
    warm_files: int = _opt("--warm-files", WARM_HELP, default=200_000, parse=_non_negative_int)


PUBLISH_HELP = ("the folder the view is published into (created if missing): in a pod a subdirectory of "
                "the volume shared with the trainer")
VIEW_HELP = ("fuse: a FUSE mount (a privileged sidecar in Kubernetes; any lookup of epoch-N asks for its "
             "cut); folder: the same layout published as plain files into --mount, no privilege needed "
             "(docs/folderview.md)")


@dataclass(frozen=True)
class PublishSettings(CacheSettings):
    """The folder view alone (``epochfs publish``): the FUSE view's layout written as files."""

    mount: Path = _opt("--mount", PUBLISH_HELP, parse=Path, required=True)
    link_root: Path | None = _opt(
        "--link-root",
        "read-only path to the objects folder that epoch symlinks point into, as readers see it "
        "(default: the cache's own objects folder)",
        parse=Path,
    )

    def validate(self) -> None:
        super().validate()
        if self.mount.exists() and not self.mount.is_dir():
            raise ConfigError(f"--mount: {self.mount} exists and is not a folder")
        if self.link_root is not None and not self.link_root.is_absolute():
            raise ConfigError(f"--link-root: {self.link_root} must be an absolute path")


@dataclass(frozen=True)
class SidecarSettings(SamplerSettings):
    """Sampler + the view (FUSE server or folder publisher) + health and metrics endpoints
    (``epochfs sidecar``)."""

    mount: Path = _opt("--mount", MOUNT_HELP + "; with --view folder, the folder the view is published into",
                       parse=Path, required=True)
    view: str = _opt("--view", VIEW_HELP, default="fuse", parse=_view)
    link_root: Path | None = _opt("--link-root", "read-only path to the objects folder", parse=Path)
    health_port: int = _opt("--health-port", "port of /healthz, /readyz and /metrics", default=8080,
                            parse=_port)
    metrics_port: int | None = _opt("--metrics-port", "separate /metrics port (default: health port)",
                                    parse=_port)
    warm_files: int = _opt("--warm-files", WARM_HELP, default=200_000, parse=_non_negative_int)
    kube_reporting: bool = _opt("--kube-reporting",
                                "Events and a status annotation on this pod when in a cluster (1/0)",
                                default=True, parse=_switch)
    kube_status_interval: float = _opt("--kube-status-interval",
                                       "seconds between patches of the pod's status annotation",
                                       default=30.0, parse=_positive_float)
    kube_error_threshold: int = _opt("--kube-error-threshold",
                                     "remote errors within a minute that raise a RemoteErrors Event",
                                     default=20, parse=_positive_int)


T = TypeVar("T", bound=CacheSettings)


def env_name(flag: str) -> str:
    """``--shard-index`` -> ``EPOCHFS_SHARD_INDEX``."""
    return "EPOCHFS_" + flag.lstrip("-").replace("-", "_").upper()


def add_arguments(parser: argparse.ArgumentParser, cls: type[CacheSettings]) -> None:
    """Declare one flag per settings field (values parsed later, so env can fill gaps)."""
    for f in fields(cls):
        meta = f.metadata
        default = "" if f.default is None else f.default
        if isinstance(default, Path):
            default = str(default)
        help_text = f"{meta['doc']} (env {env_name(meta['flag'])}"
        help_text += f"; default {default})" if default != "" else ")"
        parser.add_argument(meta["flag"], dest=f.name, default=None, metavar=f.name.upper(),
                            help=help_text)


def from_args(
    cls: type[T], ns: argparse.Namespace, environ: dict[str, str] | None = None
) -> T:
    """Build and validate settings: flag, else ``EPOCHFS_*`` variable, else the default."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for f in fields(cls):
        meta = f.metadata
        raw = getattr(ns, f.name, None)
        source = meta["flag"]
        if raw is None and env_name(meta["flag"]) in env:
            raw = env[env_name(meta["flag"])]
            source = f"{meta['flag']} (from {env_name(meta['flag'])})"
        if raw is None:
            if meta["required"]:
                raise ConfigError(f"{meta['flag']}: required (or set {env_name(meta['flag'])})")
            values[f.name] = f.default
            continue
        try:
            values[f.name] = meta["parse"](raw)
        except (ValueError, TypeError) as e:
            raise ConfigError(f"{source}: {e}") from None
    settings = cls(**values)
    settings.validate()
    return settings


def parse(cls: type[T], argv: Sequence[str], environ: dict[str, str] | None = None) -> T:
    """Parse a flag list into settings (used by tests and by child processes)."""
    parser = argparse.ArgumentParser(prog="epochfs", exit_on_error=False)
    add_arguments(parser, cls)
    try:
        ns = parser.parse_args(list(argv))
    except argparse.ArgumentError as e:
        raise ConfigError(str(e)) from None
    return from_args(cls, ns, environ)


def to_env(settings: CacheSettings, cls: type[CacheSettings] | None = None) -> dict[str, str | None]:
    """``EPOCHFS_*`` variables that reproduce ``settings`` for ``cls`` (None: unset it).

    The supervisor starts its children with these rather than with flags: a command line is
    visible to every user of the node (``ps -ef``), and settings can hold secrets (a password in
    ``--endpoint-url``)."""
    out: dict[str, str | None] = {}
    for f in fields(cls or type(settings)):
        value = getattr(settings, f.name)
        out[env_name(f.metadata["flag"])] = None if value is None else str(value)
    return out


# ---- the log level (issue 12): one setting shared by every command, so it lives outside the
# settings classes above; epochfs.sidecar.cli declares the flag before and after the command.
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LOG_LEVEL_FLAG = "--log-level"
LOG_LEVEL_DEFAULT = "INFO"


def resolve_log_level(flag_value: str | None, environ: Mapping[str, str] | None = None) -> str:
    """The level from ``--log-level``, else ``EPOCHFS_LOG_LEVEL`` (empty counts as unset), else
    INFO; names in any case. Anything else raises :class:`ConfigError` naming where it came from."""
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


__all__ = [
    "LOG_LEVELS",
    "CacheSettings",
    "ConfigError",
    "MountSettings",
    "PublishSettings",
    "SamplerSettings",
    "SidecarSettings",
    "add_arguments",
    "env_name",
    "format_size",
    "from_args",
    "parse",
    "parse_size",
    "resolve_log_level",
    "to_env",
]
