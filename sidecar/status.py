"""``epochfs status``: occupancy bar, epochs table, rates and error counts, from a cache or a mount.

It reads the same document the mount serves as ``.epochfs/status.json`` (``Store.stats()``), so it
works while a sidecar runs and on a cache folder with no sidecar. With ``--cache`` it adds the
supervisor's own totals (samples and bytes served, what the torch client reported), which the
supervisor saves in the store every few seconds. Rates come from the difference between two
readings, so no process has to keep rate state for them: ``--watch`` redraws in place, and a plain
``epochfs status`` reads twice, a second apart (:func:`one_shot_view`), for its ``rates:`` line and,
before the first cut, epoch 0's estimate (:mod:`epochfs.sidecar.status_estimate`). ``--json``
prints the counters of one reading.

What the index cannot say, the supervisor writes into its state file in the cache
(:data:`~epochfs.sidecar.store.stats.STATE_FILE_NAME`): the sampler retrying after a transient
failure (the remote unreachable at its start). :func:`read_stats` adds that as ``sampler_retrying``,
the line ``/readyz`` gives as its reason (with ``--cache``, a running sampler's outage of the remote
too, which it records in the index: ``outage``, ``outage_cause``); with ``--mount`` the cache is
found through the mount's source (``epochfs:<cache>``, the FUSE server's), else ``EPOCHFS_CACHE``
(set in the sidecar's container).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from epochfs.sidecar import status_facts as facts
from epochfs.sidecar.config import ConfigError, format_size
from epochfs.sidecar.status_estimate import ESTIMATE_SECONDS, estimate
from epochfs.sidecar.status_lines import epoch_lines, fmt_rates, in_flight_words, listing_lines, rates
from epochfs.sidecar.statusread import ANSWER_SECONDS, read_status_file, within
from epochfs.sidecar.store import INDEX_NAME, Meta, Store, StoreError
from epochfs.sidecar.store.diskmargin import show_volume_full
from epochfs.sidecar.store.stats import RETRYING_MAX_AGE, STATE_FILE_NAME, retry_words

BAR_WIDTH = 40
CLEAR = "\x1b[H\x1b[2J"


STATE_MAX_AGE = RETRYING_MAX_AGE
"""Seconds after which the supervisor's state file is taken for one a dead supervisor left: a live
one rewrites it at each restart and each start of a retry (at most 30 s apart: its longest
backoff, or a run that reaches 30 s and ends the retrying, when it removes the file). Its age, not
its pid: ``epochfs status --mount`` runs in the trainer's container, another PID namespace, where
that pid is another process or none."""


STATUS_STALE_AFTER = 30.0
"""Seconds after which a status document (its ``time``) is shown as stale. A running sidecar keeps
it fresh: the FUSE view re-reads the index every 0.5 s and renders ``status.json`` at each open,
the folder view rewrites its file every second. An older one is a folder view whose volume is
full (the rewrite cannot be written, so the file keeps its last version from before the pause:
``publish_paused`` unset, old counts) or a sidecar that stopped; ``--cache`` reads the index itself."""


def stale_line(stats: dict[str, Any], now: float) -> str | None:
    """A warning when the document was written more than :data:`STATUS_STALE_AFTER` seconds
    before ``now`` (wall clock); None when fresh or without a ``time``."""
    written = stats.get("time")
    if not isinstance(written, (int, float)) or now - written <= STATUS_STALE_AFTER:
        return None
    return (f"STALE: this status was written {now - written:.0f} s ago (a running sidecar rewrites it "
            "every second): the folder view's volume may be full (publishing paused, status.json "
            "not rewritten) or the sidecar has stopped; `epochfs status --cache CACHE` in the sidecar "
            "reads the index itself")


def _cache_of_mount(mount: Path) -> Path | None:
    """The cache a running sidecar serves at ``mount``: the FUSE mount's source names it; the
    folder view has no mount, so ``EPOCHFS_CACHE`` (the sidecar container's setting) is tried."""
    from epochfs.fuse.mounting import find_mount

    entry = find_mount(mount)
    if entry is not None and entry.source.startswith("epochfs:"):
        return Path(entry.source[len("epochfs:"):])
    env = os.environ.get("EPOCHFS_CACHE")
    return Path(env) if env else None


def retry_line(state: dict[str, Any], now: float) -> str | None:
    """``remote unreachable: <reason>; retry 3 in 8 s`` (or ``...; retry 3 running for 1 s``)
    from a supervisor state document at wall-clock ``now``: the words of ``/readyz``'s reason
    (``ChildProcesses.retry_note``); None when the sampler is not retrying."""
    return retry_words(state.get("sampler") or {}, now)


def read_retrying(*, cache: Path | None, mount: Path | None) -> str | None:
    """The sampler's retry line from the supervisor's state file (:func:`retry_line`), when a
    live supervisor wrote one for this cache (and, with ``mount``, for this mount); else None."""
    if cache is None and mount is not None:
        cache = _cache_of_mount(mount)
    if cache is None:
        return None
    try:
        path = cache / STATE_FILE_NAME
        if time.time() - path.stat().st_mtime > STATE_MAX_AGE:
            return None
        state = json.loads(path.read_text())
        if not isinstance(state, dict):
            return None
        if mount is not None:
            from epochfs.fuse.mounting import canonical

            if canonical(Path(str(state.get("mount", "")))) != canonical(mount):
                return None
        return retry_line(state, time.time())
    except (OSError, ValueError, TypeError, AttributeError):
        return None  # no file (nothing retrying), or one being replaced: status goes on without it


def read_stats(*, cache: Path | None, mount: Path | None) -> dict[str, Any]:
    """The status document: from the mount's ``.epochfs/status.json`` or straight from the index."""
    if mount is not None:
        path = mount / ".epochfs" / "status.json"
        try:
            doc = facts.mount_document(path, read_status_file(path).decode("utf-8", "replace"))
        except FileNotFoundError:
            cache_here = os.path.isfile(mount / INDEX_NAME)
            hint = ": this is a cache folder: pass it as --cache" if cache_here else ""
            raise ConfigError(f"--mount: {mount} is not an epochfs mount (no {path.name}){hint}") from None
        except OSError as e:
            raise ConfigError(f"--mount: cannot read {path}: {e.strerror}") from None
    else:
        assert cache is not None
        with Store(cache) as store:
            doc = store.stats().to_json()
            saved, outage = store.meta(Meta.SIDECAR_TOTALS), store.meta(Meta.OUTAGE)
            # Beside the store's connection, which keeps the index's shared memory for this read.
            facts.mark_pins(doc, cache, store.policy())
        if saved:
            with contextlib.suppress(ValueError, TypeError, AttributeError):  # a damaged value: skip it
                doc.update(facts.totals(saved))
        facts.sampler_facts(doc, cache)
        show_volume_full(doc, cache)  # a pause the index could not record (a volume full to its last byte)
        facts.outage_facts(doc, outage, cache)
    retrying = read_retrying(cache=cache, mount=mount) or doc.get("outage")
    if retrying:
        doc["sampler_retrying"] = retrying
    return doc


FIRST_CUT = {
    "fuse": "it is cut at the first lookup of epoch-0",
    "folder": ("on the folder view it is cut when the torch client asks for it, at --cut-interval or "
               "by `epochfs cut` (a plain lookup of epoch-0 cuts nothing)"),
    None: ("it is cut at the first lookup of epoch-0 on the FUSE view; on the folder view when the "
           "torch client asks for it, at --cut-interval or by `epochfs cut`"),
}
"""How epoch 0 gets cut once its samples are cached, per view (:func:`view_of`; None: not known,
both said): a lookup cuts on the FUSE view only (docs/folderview.md, "who cuts epoch N")."""


def view_of(*, mount: Path | None) -> str | None:
    """The view the status is read from: with ``--mount``, ``fuse`` for a FUSE mount there and
    ``folder`` for a plain folder (the folder view has no mount); with ``--cache``,
    ``EPOCHFS_VIEW`` (the sidecar container's setting), else None: the cache says neither."""
    if mount is not None:
        from epochfs.fuse.mounting import find_mount

        entry = find_mount(mount)
        return "fuse" if entry is not None and entry.fstype.startswith("fuse") else "folder"
    view = os.environ.get("EPOCHFS_VIEW", "").strip().lower()
    return view if view in ("fuse", "folder") else None


def first_epoch_line(stats: dict[str, Any], rate_values: dict[str, float] | None = None, *,
                     view: str | None = None) -> str | None:
    """``epoch 0: 54/200 samples cached (27%), ~20 s at 2.7 samples/s (2.1 MiB/s)`` before the
    first cut (the estimate once two readings give a rate); None once an epoch exists. Once its
    samples are there, how it is cut on ``view`` (:data:`FIRST_CUT`)."""
    first = stats.get("first_epoch")
    if not first:
        return None
    have, target = int(first.get("samples", 0)), max(1, int(first.get("target", 1)))
    line = f"epoch 0: {min(have, target)}/{target} samples cached ({100 * min(1.0, have / target):.0f}%)"
    if (held := first_epoch_hold(first, have, target, warning="; WARNING: ")) is not None:
        # No estimate after it: with the budget's note, more fetches evict as many as they bring.
        return line + held
    if have >= target:
        return f"{line}: {FIRST_CUT.get(view, FIRST_CUT[None])}"
    r = rate_values or {}
    inflight = (int(stats.get("inflight_downloaded_bytes") or 0), int(stats.get("inflight_bytes") or 0))
    return line + estimate(have, target, r.get("fetch samples/s"), r.get("fetch MB/s", 0.0) * 1e6, inflight)


def first_epoch_hold(first: dict[str, Any], have: int, target: int, *, warning: str) -> str | None:
    """What holds epoch 0's cut back, in the words that follow a line on its progress (``have``
    of ``target`` samples, from the store's ``first_epoch``): the store's warning (after
    ``warning``), why the epoch holds fewer than are cached (:func:`budget_note`), or the
    listing's first round still under way once the samples are there; None when nothing does.
    ``epochfs status``'s line (:func:`first_epoch_line`) and ``epochfs cut``'s refusal
    (:func:`epochfs.sidecar.cli_cache.not_met`) both end with it, each after its own head."""
    if first.get("warning"):
        return f"{warning}{first['warning']}"
    if note := budget_note(first):
        return f"; {note}"
    if have >= target and first.get("listing_round"):
        return ", waiting for the listing's first round (a page of every folder, at most 3 s)"
    return None


def budget_note(first: dict[str, Any]) -> str | None:
    """Why epoch 0 would hold fewer samples than are cached, from the store's ``first_epoch``
    (``cached`` and ``budget`` are there only then: :func:`.stats.epoch_holds`): an epoch holds
    the newest samples within the epoch budget, so "300/350" is not a count of the 400 cached.
    ``epochfs status`` and ``epochfs cut``'s refusal say it."""
    if first.get("cached") is None or first.get("budget") is None:
        return None
    return (f"{int(first['cached'])} cached, of which an epoch holds the newest "
            f"{int(first.get('samples', 0))}: those within the epoch budget of "
            f"{format_size(int(first['budget']))} (--capacity less --headroom)")


def render(stats: dict[str, Any], rate_values: dict[str, float] | None = None, *,
           now: float | None = None, view: str | None = None) -> str:
    """Human view of a status document (and of rates, when two readings are known), first saying
    when it is stale at wall-clock ``now`` (default: the time now); ``view``: the view it is read
    from, for how epoch 0 is cut (:func:`view_of`)."""
    used = int(stats.get("cache_bytes") or 0)
    inflight = int(stats.get("inflight_bytes") or 0)
    cap = max(1, int(stats.get("capacity_bytes") or 0))
    filled = min(BAR_WIDTH, round(BAR_WIDTH * used / cap))
    pending = min(BAR_WIDTH - filled, round(BAR_WIDTH * inflight / cap))
    bar = "#" * filled + "+" * pending + "." * (BAR_WIDTH - filled - pending)
    stale = stale_line(stats, time.time() if now is None else now)
    lines = [
        *([stale] if stale else []),
        f"cache [{bar}] {format_size(used)} / {format_size(cap)} ({100 * used / cap:.1f}%)"
        + in_flight_words(inflight, int(stats.get("inflight_downloaded_bytes") or 0)),
        f"samples {stats.get('samples', '?')}  fetched {stats.get('fetched_total', '?')} "
        f"({format_size(int(stats.get('fetched_bytes_total') or 0))})"
        f"  evicted {stats.get('evicted_total', '?')}"
        f"  catalog {stats.get('catalog_objects', 0)}  cuts {stats.get('cuts_total', 0)}"
        f"  mode {stats.get('mode', 'snapshot')}",
    ]
    lines.extend(listing_lines(stats.get("listing") or {}))
    if "served_samples_total" in stats:
        lines.append(
            f"served {int(stats['served_samples_total'])} sample opens "
            f"({format_size(int(stats.get('served_bytes_total', 0)))})"
            + (f"  client reported {int(stats.get('client_samples_total', 0))} samples, waited "
               f"{float(stats.get('client_wait_seconds_total', 0)):.1f}s"
               if stats.get("client_samples_total") else "")
        )
    lines.append(
        f"errors: {stats.get('skipped_total', '?')} object(s) skipped (failed after retries or refused)"
        + (f"  backpressure: YES ({stats.get('backpressure_reason') or 'cache full'}; sampling paused)"
           if stats.get("backpressure") else "  backpressure: no")
    )
    if stats.get("sampler_retrying"):  # not running, and why, and when it starts again: one line
        lines.append(f"sampler: {stats['sampler_retrying']}")
    elif stats.get("sampler_running") is False:
        lines.append(facts.NOT_RUNNING)
    if stats.get("publish_paused"):
        lines.append(f"folder view: publishing PAUSED: {stats['publish_paused']} (published epochs stay "
                     "readable; it resumes by itself when room comes back)")
    if rate_values:
        lines.append(fmt_rates(rate_values))
    pending_cuts = stats.get("pending_cuts") or []
    if pending_cuts:
        lines.append(f"pending cuts: {', '.join(str(n) for n in pending_cuts)}")
    epochs = stats.get("epochs") or []
    lines.extend(epoch_lines(epochs))
    later = stats.get("next_epoch") or {}
    if later.get("warning"):  # an epoch the settings never let be cut: said, not waited on
        lines.append(f"  epoch {later.get('epoch')}: {later.get('samples', 0)}/{later.get('target')} "
                     f"samples; WARNING: {later['warning']}")
    if not epochs:
        first = first_epoch_line(stats, rate_values, view=view)
        lines.append(f"  (no epoch cut yet{': ' + first if first else ''})")
    return "\n".join(lines)


def one_shot_view(read: Callable[[], dict[str, Any]], first: dict[str, Any], *, view: str | None = None,
                  pause: float = ESTIMATE_SECONDS, sleep: Callable[[float], None] = time.sleep,
                  clock: Callable[[], float] = time.monotonic) -> str:
    """A plain ``epochfs status``: ``first``, then a second reading ``pause`` seconds later, drawn
    with the rates between the two (``rates:``; before the first cut, epoch 0's estimate). The
    rates are what an operator asks of it once epochs exist too (the EpochfsSamplerStalled
    runbook: is anything fetched?), and a document holds counters only. One reading where no
    sampler runs (``sampler_running`` false, known with ``--cache``: nothing fetches) or where the
    second read fails (a FUSE server restarting): that one is shown, without rates."""
    if first.get("sampler_running") is False:
        return render(first, view=view)
    started = clock()
    sleep(pause)
    later, _ = retried(read)
    if later is None:
        return render(first, view=view)
    return render(later, rates(first, later, clock() - started), view=view)


def watch_view(
    read: Callable[[], dict[str, Any]],
    *,
    interval: float,
    out: TextIO,
    iterations: int | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    view: str | None = None,
) -> None:
    """Redraw the view every ``interval`` seconds (``iterations`` bounds it for tests). A reading
    that fails (:func:`retried`) is shown as a line and tried again at the next interval."""
    previous: tuple[float, dict[str, Any]] | None = None
    shown = 0
    while iterations is None or shown < iterations:
        stats, error = retried(read)
        now = clock()
        if stats is None:
            out.write(f"{CLEAR}{error}\n")
        else:
            rate_values = rates(previous[1], stats, now - previous[0]) if previous is not None else None
            previous = (now, stats)
            out.write(CLEAR + render(stats, rate_values, view=view) + "\n")
        out.flush()
        shown += 1
        if iterations is None or shown < iterations:
            sleep(interval)


def retried(read: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any] | None, str]:
    """One reading for ``--watch``: (the document, "") or (None, the error's line). A watch
    outlives a FUSE server's restart (the sidecar repairs the mount within a second, and a read
    meanwhile fails): it says so and reads again at the next interval; one-shot status exits 2."""
    try:
        return read(), ""
    except (ConfigError, StoreError) as e:  # StoreError: an index rebuilt under the watch (a second)
        what = f"--cache: {e}" if isinstance(e, StoreError) else str(e)
        return None, f"{time.strftime('%H:%M:%S')} {what} (read again at the next interval)"


MAX_INTERVAL = 86400.0
"""``--interval`` at most, in seconds: a day between two readings. Past what the clock's sleep
takes (``1e300``), ``--watch`` ended in a traceback ("timestamp out of range") after its first
screen; a day is far past any use, and refused in one line before anything is read."""


def run_status(
    *, cache: Path | None, mount: Path | None, as_json: bool, watch: bool, interval: float,
    answer_seconds: float = ANSWER_SECONDS,
) -> int:
    """``answer_seconds``: how long each look at ``mount`` may take (:func:`.statusread.within`)."""
    if interval <= 0:
        raise ConfigError("--interval: must be positive")
    if interval > MAX_INTERVAL:
        raise ConfigError(f"--interval: must be at most {MAX_INTERVAL:g} seconds (a day between two "
                          f"readings), not {interval:g}")

    def read() -> dict[str, Any]:
        if mount is None:
            return read_stats(cache=cache, mount=None)
        return within(lambda: read_stats(cache=cache, mount=mount), mount=mount, seconds=answer_seconds)

    view = view_of(mount=mount)
    if not watch:
        stats = read()
        if as_json:  # the counters as they are now: a script takes its own readings for rates
            json.dump(stats, sys.stdout, indent=2, sort_keys=True)
            sys.stdout.write("\n")
        else:
            print(one_shot_view(read, stats, view=view))
        return 0
    # A --mount that does not exist (a typo) exits 2 as a one-shot status does; one that is there
    # but is no mount yet (the sidecar starting) or fails a read (a FUSE restart) is watched: the
    # error shown, read again at the next interval.
    if mount is not None and not within(lambda: os.path.lexists(mount), mount=mount, seconds=answer_seconds):
        raise ConfigError(f"--mount: {mount} does not exist")
    if as_json:  # one JSON document per line, for scripts that follow a run; errors on stderr
        while True:
            doc, error = retried(read)
            if doc is None:
                sys.stderr.write(error + "\n")
                sys.stderr.flush()
            else:
                sys.stdout.write(json.dumps(doc, sort_keys=True) + "\n")
                sys.stdout.flush()
            time.sleep(interval)
    watch_view(read, interval=interval, out=sys.stdout, view=view)
    return 0
