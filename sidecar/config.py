"""Typed settings for every epochfs command, from flags and ``EPOCHFS_*`` environment variables.

Each field is declared once, with its flag, type, default and a line of doc; the argparse parser,
the environment lookup and the docs (``epochfs <cmd> --help``) all come from that declaration.
Flags win over the environment, the environment over defaults. Invalid values raise
:class:`ConfigError` naming the flag; the CLI turns it into one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, TypeVar

from epochfs.sidecar.confparse import (
    OTHER_ENV,
    _bounded,
    _capacity,
    _fraction,
    _fuse_api,
    _integer,
    _non_negative_float,
    _non_negative_int,
    _opt,
    _optional_port,
    _optional_size,
    _port,
    _positive_float,
    _positive_int,
    _rate,
    _schedule,
    _switch,
    _view,
    env_name,
    format_size,
    join_negative_values,
    parse_size,
    shown_default,
    unknown_env,
    warn_unknown_env,
)
from epochfs.sidecar.confplaces import _endpoint_url, _index_url, _optional_path, _path, _remote
from epochfs.sidecar.exitcodes import EXIT_INDEX as EXIT_INDEX
from epochfs.sidecar.exitcodes import EXIT_RETRY as EXIT_RETRY
from epochfs.sidecar.exitcodes import INDEX_DAMAGES_UNHEALTHY as INDEX_DAMAGES_UNHEALTHY
from epochfs.sidecar.exitcodes import RetryLater as RetryLater
from epochfs.sidecar.remote.registry import HELP as REMOTE_HELP
from epochfs.sidecar.store import Policy, Schedule
from epochfs.sidecar.viewhelp import FUSE_API_HELP, MOUNT_HELP, PUBLISH_HELP, VIEW_HELP, WARM_HELP
from epochfs.torchclient.globs import Globs
from epochfs.torchclient.layout import VIEW_REFRESH_SECONDS


class ConfigError(ValueError):
    """A bad flag or environment value; the message names the flag."""


Named = Callable[[str], str]
"""How a check names a flag in its message: the flag, or ``--flag (from EPOCHFS_<FLAG>)`` where the
value came from the environment (:func:`from_args`), so a refusal comparing two settings points
at the variable to fix, as a single setting's refusal does."""

MAX_LIST_THREADS = 256
"""``--list-threads`` at most (``epochfs index`` too): 100,000 listers made an index take 14.9 s
where 8 took 1.4 s, every thread started and stopped for pages it never had."""
MAX_CONCURRENCY = 1024
"""``--concurrency`` at most: each download in flight is a thread with a 1 MiB read buffer, so a
slip such as 100,000 spent half a minute starting threads before failing, and 4,096 asks 4 GiB
of the chart's 2 GiB sidecar; past a few hundred the remote, not the count, sets the rate."""
MAX_READ_TIMEOUT = 3600.0
"""``--read-timeout`` at most, in seconds: an hour of silence is a stalled download, and a socket
refuses a timeout past what it can take (``inf``, ``1e300``), which the listing's first socket would
report as a listing error instead of as this flag's."""

MIN_RETIRE_GRACE = 2 * VIEW_REFRESH_SECONDS
"""``--retire-grace`` at least: twice the FUSE view's refresh interval
(:data:`~epochfs.torchclient.layout.VIEW_REFRESH_SECONDS`): no view shows an epoch whose files are gone."""
MAX_RETIRE_GRACE = 3600.0


def _retire_grace(text: str) -> float:
    value = _positive_float(text)
    if value < MIN_RETIRE_GRACE:
        raise ValueError(f"must be at least {MIN_RETIRE_GRACE:g} (a view refreshes its epochs every "
                         f"{VIEW_REFRESH_SECONDS:g} s and must not show one whose files are gone)")
    return value


@dataclass(frozen=True)
class CacheSettings:
    """Where the node cache lives."""

    cache: Path = _opt("--cache", "cache directory on the node volume", parse=_path, required=True)

    def validate(self, name: Named = str) -> None:
        """Refuse settings that cannot work together; ``name`` names a flag (:data:`Named`)."""
        if self.cache.exists() and not self.cache.is_dir():
            raise ConfigError(f"{name('--cache')} {self.cache}: exists and is not a directory")


@dataclass(frozen=True)
class SamplerSettings(CacheSettings):
    """What to sample, how fast, and the cache rules (``epochfs sample`` and ``epochfs sidecar``)."""

    remote: str = _opt("--remote", f"dataset URL: {REMOTE_HELP}",
                       parse=_remote, required=True)
    capacity: int = _opt("--capacity", "cache byte budget, e.g. 500Mi, 20Gi, 1.5T",
                         default=10 * 1024**3, parse=_capacity)
    seed: int = _opt("--seed", "seed of the sampling order (same seed, same order)", default=0,
                     parse=_integer)
    shard_index: int = _opt("--shard-index", "this node's shard (0-based)", default=0,
                            parse=_non_negative_int)
    shard_count: int = _opt("--shard-count", "number of shards (nodes)", default=1, parse=_positive_int)
    concurrency: int = _opt("--concurrency", "downloads in flight (at most 1024)", default=32,
                            parse=_bounded(_positive_int, MAX_CONCURRENCY, "a thread and a 1 MiB "
                                           "buffer each; 100,000 could not be started"))
    endpoint_url: str | None = _opt("--endpoint-url", "S3-compatible endpoint, an http(s) URL such as "
                                    "http://minio:9000 (AWS_* credentials honoured)", parse=_endpoint_url)
    min_samples: int = _opt("--min-samples", "complete samples an epoch holds at least (no cut "
                            "holds fewer, but for `epochfs cut --force`)", default=1, parse=_positive_int)
    keep_epochs: int = _opt("--keep-epochs", "newest epochs kept pinned", default=2, parse=_positive_int)
    max_object_size: int | None = _opt("--max-object-size",
                                       "skip objects larger than this (default, or empty: what an epoch "
                                       "can hold)", parse=_optional_size)
    schedule: Schedule | None = _opt("--schedule", "schedule mode, e.g. initial=1000,growth=1.5",
                                     parse=_schedule)
    headroom: float = _opt("--headroom", "share of capacity kept free of epochs for new samples",
                           default=0.25, parse=_fraction)
    retries: int = _opt("--retries", "attempts per object before it is skipped", default=5,
                        parse=_positive_int)
    index_url: str | None = _opt("--index",
                                 "read the keys from this index instead of listing the remote: an "
                                 "`epochfs index` file or an S3 Inventory manifest.json, any fsspec URL "
                                 "(for http(s) remotes also a plain key list; default <base>/index.txt)",
                                 parse=_index_url)
    include: Globs | None = _opt("--include",
                                 "take only the keys matching one of these globs, a comma-separated "
                                 "list matched against the key relative to --remote: '*.npy' (a name "
                                 "at any depth), 'train/**' (everything under train/), 'a/*/b.npz'; "
                                 "the others are never listed into the catalog nor fetched, and "
                                 "counted in status (docs/listing.md, \"Choosing the files\"; "
                                 "default: every key)", parse=Globs.parse)
    exclude: Globs | None = _opt("--exclude",
                                 "leave out the keys matching one of these globs (same syntax as "
                                 "--include, and applied after it), e.g. '**/*.json,*.tmp'",
                                 parse=Globs.parse)
    list_threads: int = _opt("--list-threads", "listers working at once on the remote's folders or key "
                             "ranges (S3), each one page at a time (every folder advances at the same "
                             "rate whatever this is; more listers list faster where there are cores to "
                             "parse pages, and slow the sampler where there are not)",
                             default=4, parse=_bounded(_positive_int, MAX_LIST_THREADS, "a thread each; "
                                                       "past a few tens the store's answers, not the "
                                                       "count, set the rate"))
    list_process: bool = _opt("--list-process",
                              "list in a process of its own, beside the sampler's (1/0): the listing's "
                              "CPU (page parsing, key checks) then does not share the sampler's "
                              "interpreter lock; 0 lists on threads of the sampler's process",
                              default=True, parse=_switch)
    direct_writes: bool = _opt("--direct-writes",
                               "write downloaded bodies past the page cache, O_DIRECT (1/0): less CPU "
                               "and no dirty pages charged to the container's memory; a sample's first "
                               "read then comes from the disk. Volumes that refuse O_DIRECT are written "
                               "buffered either way",
                               default=True, parse=_switch)
    relist_interval: float = _opt("--relist-interval",
                                  "list the remote again every N seconds in the background to pick up "
                                  "new and deleted keys (0: never; `epochfs relist` asks at any time)",
                                  default=0.0, parse=_non_negative_float)
    in_use_seconds: float = _opt("--in-use-seconds",
                                 "an epoch looked up this recently stays pinned beyond --keep-epochs",
                                 default=600.0, parse=_non_negative_float)
    retire_grace: float = _opt("--retire-grace",
                               "seconds a retired epoch's files stay on disk for views that still show it "
                               f"(at least {MIN_RETIRE_GRACE:g}: the FUSE view refreshes every "
                               f"{VIEW_REFRESH_SECONDS:g} s); a full cache's turnover may wait this long",
                               default=Policy.retire_grace,
                               parse=_bounded(_retire_grace, MAX_RETIRE_GRACE,
                                              "an hour of unreadable samples on disk"))
    max_rate: int | None = _opt("--max-rate", "limit on download bytes per second, e.g. 50Mi (default, or "
                                "empty: none)", parse=_optional_size)
    cut_interval: float = _opt("--cut-interval", "cut a new epoch every N seconds (0: only on request)",
                               default=0.0, parse=_non_negative_float)
    read_timeout: float = _opt("--read-timeout",
                               "seconds of silence before a download counts as stalled and is retried",
                               default=30.0, parse=_bounded(_positive_float, MAX_READ_TIMEOUT,
                                                            "an hour of silence is a stalled download"))
    progress_seconds: float = _opt("--progress-seconds", "seconds between the sampler's progress lines",
                                   default=5.0, parse=_positive_float)
    scrub_rate: int = _opt("--scrub-rate",
                           "bytes per second the background scrub reads to check cached objects against "
                           "the digest recorded at admission, evicting and fetching again damaged ones "
                           "(0: no scrub; a positive rate below 1 byte per second is refused, not "
                           "rounded)",
                           default=8 * 1024**2, parse=_rate)

    def policy(self) -> Policy:
        """The cache rules these settings give, as the store records them."""
        return Policy(capacity=self.capacity, keep_epochs=self.keep_epochs, min_samples=self.min_samples,
                      headroom=self.headroom, in_use_seconds=self.in_use_seconds, schedule=self.schedule,
                      retire_grace=self.retire_grace)

    @property
    def object_limit(self) -> int:
        """Largest object fetched: --max-object-size, or what one epoch may hold."""
        budget = self.policy().epoch_budget
        return budget if self.max_object_size is None else min(self.max_object_size, budget)

    def validate(self, name: Named = str) -> None:
        super().validate(name)
        if self.shard_index >= self.shard_count:
            raise ConfigError(f"{name('--shard-index')}: {self.shard_index} must be below "
                              f"{name('--shard-count')} {self.shard_count}")
        if self.schedule is not None and self.min_samples > self.schedule.initial:  # never met
            raise ConfigError(f"{name('--min-samples')}: {self.min_samples} is more than "
                              f"{name('--schedule')}'s initial={self.schedule.initial}, the keys of epoch "
                              "0's window: epoch 0 could never be cut; lower --min-samples or raise initial=")
        if self.schedule is None and self.headroom == 0:
            # Snapshot mode cuts the newest samples within capacity x (1 - headroom): with none
            # left out, a full cache's epochs pin it whole and no later epoch could differ.
            raise ConfigError(f"{name('--headroom')}: 0 leaves no room to fetch while epochs are pinned in "
                              "snapshot mode (every later epoch would equal the last); use a share in (0, 1)")
        if self.max_object_size is not None and self.capacity < self.max_object_size:
            raise ConfigError(f"{name('--capacity')}: {format_size(self.capacity)} is smaller than "
                              f"{name('--max-object-size')} {format_size(self.max_object_size)}")


@dataclass(frozen=True)
class MountSettings(CacheSettings):
    """The read-only FUSE view (``epochfs mount``)."""

    mount: Path = _opt("--mount", MOUNT_HELP, parse=_path, required=True)
    link_root: Path | None = _opt(
        "--link-root",
        "read-only path to the objects folder that epoch symlinks point into "
        "(default, or empty: a read-only bind mount made under the cache)",
        parse=_optional_path,
    )
    warm_files: int = _opt("--warm-files", WARM_HELP, default=200_000, parse=_non_negative_int)
    fuse_api: str = _opt("--fuse-api", FUSE_API_HELP, default="lowlevel", parse=_fuse_api)


@dataclass(frozen=True)
class PublishSettings(CacheSettings):
    """The folder view alone (``epochfs publish``): the FUSE view's layout written as files."""

    mount: Path = _opt("--mount", PUBLISH_HELP, parse=_path, required=True)
    link_root: Path | None = _opt(
        "--link-root",
        "read-only path to the objects folder that epoch symlinks point into, as readers see it "
        "(default, or empty: the cache's own objects folder)",
        parse=_optional_path,
    )

    def validate(self, name: Named = str) -> None:
        super().validate(name)
        if self.link_root is not None and not self.link_root.is_absolute():
            raise ConfigError(f"{name('--link-root')}: {self.link_root} must be an absolute path")


@dataclass(frozen=True)
class SidecarSettings(SamplerSettings):
    """Sampler + the view (FUSE server or folder publisher) + health and metrics endpoints
    (``epochfs sidecar``)."""

    mount: Path = _opt("--mount", MOUNT_HELP + "; with --view folder, the folder the view is published into",
                       parse=_path, required=True)
    view: str = _opt("--view", VIEW_HELP, default="fuse", parse=_view)
    link_root: Path | None = _opt("--link-root", "read-only path to the objects folder (default, or "
                                  "empty: a read-only bind mount made under the cache; with --view "
                                  "folder, the cache's own objects folder)", parse=_optional_path)
    health_port: int = _opt("--health-port", "port of /healthz, /readyz and /metrics", default=8080,
                            parse=_port)
    metrics_port: int | None = _opt("--metrics-port", "separate /metrics port (default, or empty: the "
                                    "health port)", parse=_optional_port)
    warm_files: int = _opt("--warm-files", WARM_HELP, default=200_000, parse=_non_negative_int)
    fuse_api: str = _opt("--fuse-api", FUSE_API_HELP, default="lowlevel", parse=_fuse_api)
    kube_reporting: bool = _opt("--kube-reporting",
                                "Events and a status annotation on this pod when in a cluster (1/0)",
                                default=True, parse=_switch)
    kube_status_interval: float = _opt("--kube-status-interval",
                                       "seconds between patches of the pod's status annotation",
                                       default=30.0, parse=_positive_float)
    kube_error_threshold: int = _opt("--kube-error-threshold",
                                     "remote errors within a minute that raise a RemoteErrors Event",
                                     default=20, parse=_positive_int)
    termination_log: Path = _opt("--termination-log",
                                 "file that gets the reason when the sidecar stops on a refused "
                                 "setting, where it exists (Kubernetes shows it in kubectl describe pod)",
                                 default=Path("/dev/termination-log"), parse=_path)


T = TypeVar("T", bound=CacheSettings)


def add_arguments(parser: argparse.ArgumentParser, cls: type[CacheSettings]) -> None:
    """Declare one flag per settings field (values parsed later, so env can fill gaps)."""
    for f in fields(cls):
        meta = f.metadata
        default = shown_default(f.default, meta["parse"])
        help_text = f"{meta['doc']} (env {env_name(meta['flag'])}"
        help_text += f"; default {default})" if default != "" else ")"
        parser.add_argument(meta["flag"], dest=f.name, default=None, metavar=f.name.upper(),
                            help=help_text)


def from_args(
    cls: type[T], ns: argparse.Namespace, environ: dict[str, str] | None = None
) -> T:
    """Build and validate settings: flag, else ``EPOCHFS_*`` variable, else the default."""
    env = os.environ if environ is None else environ
    warn_unknown_env(env, known_env_names())
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for f in fields(cls):
        meta = f.metadata
        raw = getattr(ns, f.name, None)
        source = meta["flag"]
        if raw is None and env_name(meta["flag"]) in env:
            raw = env[env_name(meta["flag"])]
            source = sources[meta["flag"]] = f"{meta['flag']} (from {env_name(meta['flag'])})"
        if raw is None:
            if meta["required"]:
                raise ConfigError(f"{meta['flag']}: required (or set {env_name(meta['flag'])})")
            values[f.name] = f.default
            continue
        try:
            values[f.name] = meta["parse"](raw)
        except (ValueError, TypeError, OverflowError) as e:
            raise ConfigError(f"{source}: {e}") from None
    settings = cls(**values)
    settings.validate(lambda flag: sources.get(flag, flag))
    return settings


def parse(cls: type[T], argv: Sequence[str], environ: dict[str, str] | None = None) -> T:
    """Parse a flag list into settings (used by tests and by child processes)."""
    parser = argparse.ArgumentParser(prog="epochfs", exit_on_error=False)
    add_arguments(parser, cls)
    try:
        ns = parser.parse_args(join_negative_values(argv))
    except argparse.ArgumentError as e:
        raise ConfigError(str(e)) from None
    return from_args(cls, ns, environ)


def to_env(settings: CacheSettings, cls: type[CacheSettings] | None = None) -> dict[str, str | None]:
    """``EPOCHFS_*`` variables that reproduce ``settings`` for ``cls`` (None: unset it).

    The supervisor starts its children with these rather than with flags: a command line is
    visible to every user of the node (``ps -ef``), and settings can hold secrets (a password in
    an ``https://`` ``--remote`` or ``--index``). The unknown ``EPOCHFS_*`` variables of this
    process's environment are unset too: the sidecar warned of them at its start, and each child's
    start (and restart) would warn again."""
    out: dict[str, str | None] = dict.fromkeys(unknown_env_names(os.environ))
    for f in fields(cls or type(settings)):
        value = getattr(settings, f.name)
        out[env_name(f.metadata["flag"])] = None if value is None else str(value)
    return out


SETTINGS_CLASSES: tuple[type[CacheSettings], ...] = (
    CacheSettings, SamplerSettings, MountSettings, PublishSettings, SidecarSettings)


def known_env_names() -> frozenset[str]:
    """Every ``EPOCHFS_*`` variable something reads, the one list of them: each settings field's
    (derived from the declarations) and :data:`~epochfs.sidecar.confparse.OTHER_ENV`. A test fails
    on a variable read anywhere in the tree and missing here, so a name some tool does read is
    never warned of as a typo."""
    return frozenset({env_name(f.metadata["flag"]) for cls in SETTINGS_CLASSES for f in fields(cls)}
                     | OTHER_ENV.keys())


def unknown_env_names(environ: Mapping[str, str]) -> list[str]:
    """The ``EPOCHFS_*`` names of ``environ`` that nothing reads (:func:`known_env_names`), sorted."""
    return unknown_env(environ, known_env_names())


__all__ = [
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
    "known_env_names",
    "parse",
    "parse_size",
    "to_env",
]
