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
from epochfs.sidecar.confplaces import _path
from epochfs.sidecar.store import Policy, Stats, Store
from epochfs.sidecar.store.stats import DISK_FULL
from epochfs.sidecar.store.windows import Span


def cmd_cut(ns: argparse.Namespace) -> int:
    settings = config.from_args(config.CacheSettings, ns)
    volumes.check_cache(settings.cache, create=False)
    with Store(settings.cache) as store:
        try:
            n = store.cut(ns.epoch, force=ns.force, far=ns.far)
        except ValueError as e:
            raise config.ConfigError(f"--epoch: {e}") from None
        except Exception as e:
            # The high-water mark or the index cannot grow: nothing was cut (the transaction
            # rolls back), and room coming back is the way out, as for the sampler's cuts.
            # (Imported here: the sampler package is not loaded at every command's start.)
            from epochfs.sidecar.sampler.diskspace import is_disk_full

            if not is_disk_full(e):
                raise
            print(f"epochfs: cannot cut now: the cache's volume is full ({e}); try again once "
                  "room returns", file=sys.stderr)
            return config.EXIT_RETRY
        if n is None:
            print(f"epochfs: cannot cut: {forced_refusal(store.stats())}" if ns.force else
                  f"epochfs: cannot cut yet: {refusal(store, ns.epoch)} "
                  "(use --force to cut what is there)", file=sys.stderr)
            return 1
        print(n)
    return 0


def forced_refusal(stats: Stats) -> str:
    """Why ``--force`` cut nothing: an epoch still needs one sample, and a volume that holds
    nothing more gives a cut a budget of no sample (:func:`.snapshot.holds_samples`). "No sample
    is complete yet" was said beside hundreds of cached samples there."""
    if stats.samples == 0:
        return "no sample is complete yet"
    reason = stats.backpressure_reason or ""
    if reason.startswith(DISK_FULL):
        return (f"the cache's volume is full ({reason}): an epoch cut now would hold none of the "
                f"{stats.samples} cached sample(s); it can be cut once room returns")
    return f"an epoch cut now would hold none of the {stats.samples} cached sample(s)"


def refusal(store: Store, asked: int | None) -> str:
    """Why the epoch ``epochfs cut`` asked for (``asked``; None: the next) cannot be cut: in
    schedule mode, past epoch 0's first cut or for another number than 0, what that epoch's window
    lacks (:func:`window_not_met`); otherwise what the next cut would hold (:func:`not_met`).
    Epoch 0's figures were given for ``--epoch 5`` ("50 of the 50": a condition that holds)."""
    stats, policy = store.stats(), store.policy()
    n = store.next_epoch() if asked is None else asked
    if policy.schedule is not None and (stats.first_epoch is None or n != 0):
        return window_not_met(n, store.window_span(n), max(1, policy.min_samples))
    return not_met(stats, policy)


def window_not_met(n: int, span: Span | None, least: int) -> str:
    """What schedule-mode epoch ``n``'s window lacks for its cut: its keys not yet cached, or a
    ``--min-samples`` above what it holds (``span``: None before the first complete listing)."""
    if span is None:
        return (f"epoch {n}'s schedule window is not known until the first listing is complete "
                "(windows are positions in its order)")
    holds = span.cached + span.missing
    line = f"epoch {n}'s schedule window holds {span.cached} of its {holds} sample(s)"
    if holds < least:
        return f"{line}; --min-samples {least} is more than it holds: it is never cut"
    return line


def not_met(stats: Stats, policy: Policy) -> str:
    """Why the next epoch cannot be cut, as the cut condition counts (:func:`.epochs.condition_holds`):
    the samples it would hold, not the cache's; a snapshot epoch holds only the newest within the
    epoch budget, so "400 sample(s) complete, condition not met" named the wrong figure when the
    budget held 300 of the 350 ``--min-samples`` asked for."""
    from epochfs.sidecar.status import first_epoch_hold

    first, least = stats.first_epoch, max(1, policy.min_samples)
    if first is not None:  # epoch 0: the store counted what it would hold (status shows it too)
        have, target = int(first.get("samples", 0)), int(first.get("target", least))
        line = f"epoch 0 would hold {have} of the {target} sample(s) its condition needs"
        return line + (first_epoch_hold(first, have, target, warning=": ") or "")
    if policy.schedule is None and least > 1 and stats.samples >= least:
        # At least --min-samples are cached, so the budget is what leaves the epoch short.
        return (f"{stats.samples} sample(s) complete, but an epoch holds the newest within the epoch "
                f"budget of {config.format_size(policy.epoch_budget)} (--capacity less --headroom), "
                f"fewer than --min-samples {least}")
    return f"{stats.samples} sample(s) complete, condition not met"


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


STATUS_UNWRITABLE_HINT = ("use `epochfs status --mount <the view>` (it reads the view's "
                          ".epochfs/status.json), or run it where the cache is writable "
                          "(the sidecar's container)")
"""What ``status --cache`` on a cache it may only read (the trainer's read-only mount) points to."""


def cmd_status(ns: argparse.Namespace) -> int:
    from epochfs.sidecar.status import run_status

    # Either may be absent (one of the two is given); an empty one is refused, not skipped.
    cache = None if ns.cache is None else path_flag("--cache", ns.cache)
    mount = None if ns.mount is None else path_flag("--mount", ns.mount)
    if cache is not None:
        volumes.check_cache(cache, create=False, unwritable_hint=STATUS_UNWRITABLE_HINT, writes=False)
    return run_status(
        cache=cache,
        mount=mount,
        as_json=ns.json,
        watch=ns.watch,
        interval=ns.interval,
        answer_seconds=ns.answer_timeout,
    )
