"""The ``epochfs`` commands that act once on a cache folder and exit: cut, relist, verify, status.

Apart from :mod:`.cli` (the parser and the commands that start a process): these open an existing
cache, do one thing and print it. The scrub and status modules are imported when their command
runs, as the heavy ones are in :mod:`.cli`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from epochfs.sidecar import config, samplerlock, volumes
from epochfs.sidecar.confparse import _path
from epochfs.sidecar.store import Store


def cmd_cut(ns: argparse.Namespace) -> int:
    settings = config.from_args(config.CacheSettings, ns)
    volumes.check_cache(settings.cache, create=False)
    with Store(settings.cache) as store:
        try:
            n = store.cut(ns.epoch, force=ns.force, far=ns.far)
        except ValueError as e:
            raise config.ConfigError(f"--epoch: {e}") from None
        if n is None:
            stats = store.stats()
            print(
                "epochfs: cannot cut: no sample is complete yet" if ns.force else
                f"epochfs: cannot cut yet: {stats.samples} sample(s) complete, "
                f"condition not met (use --force to cut what is there)",
                file=sys.stderr,
            )
            return 1
        print(n)
    return 0


def cmd_relist(ns: argparse.Namespace) -> int:
    """Ask the running sampler of a cache for a relist (it looks within a second). Without one,
    nothing would serve the request (a sampler takes the requests made before its start as
    served): exit 1 saying so."""
    settings = config.from_args(config.CacheSettings, ns)
    volumes.check_cache(settings.cache, create=False)
    if not samplerlock.held(settings.cache):
        print(f"epochfs: no sampler runs on {settings.cache}: a relist is asked of a running one "
              "(epochfs sample or sidecar; a sampler started with --relist-interval relists on its own)",
              file=sys.stderr)
        return 1
    with Store(settings.cache) as store:
        n = store.listings().request_relist()
    print(f"relist {n} requested: the running sampler lists the remote again in the background")
    return 0


def cmd_verify(ns: argparse.Namespace) -> int:
    settings = config.from_args(config.CacheSettings, ns)
    volumes.check_cache(settings.cache, create=False)
    from epochfs.sidecar.scrub import run_verify

    return run_verify(settings.cache, as_json=ns.json, quarantine=not ns.report_only,
                      progress_every=ns.progress_seconds)


def path_flag(flag: str, value: str) -> Path:
    """A path given to a command outside the settings classes (``status``, ``unmount``,
    ``webhook``), checked as theirs are: an empty one (the working folder, as ``Path`` reads it)
    raises :class:`config.ConfigError` naming ``flag``."""
    try:
        return _path(value)
    except ValueError as e:
        raise config.ConfigError(f"{flag}: {e}") from None


def cmd_status(ns: argparse.Namespace) -> int:
    from epochfs.sidecar.status import run_status

    # Either may be absent (one of the two is given); an empty one is refused, not skipped.
    cache = None if ns.cache is None else path_flag("--cache", ns.cache)
    mount = None if ns.mount is None else path_flag("--mount", ns.mount)
    if cache is not None:
        volumes.check_cache(cache, create=False)
    return run_status(
        cache=cache,
        mount=mount,
        as_json=ns.json,
        watch=ns.watch,
        interval=ns.interval,
    )
