"""Cuts asked for over HTTP: ``POST /v1/cut?epoch=N`` (and ``&jump=1``), the folder view's lookup.

Why: on the FUSE view a trainer's lookup of ``epoch-N`` is what asks for its cut; a folder on a
shared volume has no lookup to intercept, so the torch client asks the sidecar on its loopback
port instead (``EpochDataset`` / ``EpochLoader`` when ``epoch-N/`` is not there). The request
follows the store's rule for lookups, so no request, however stray, can cost a cut or make an
epoch a trainer will ask for impossible:

* **next only**: a request for the next epoch (newest + 1, or above the store's high-water mark
  after an index reset: ``Store.next_epoch``) cuts it when its condition holds, or
  queues it (the sampler cuts it as soon as the condition holds); a request further ahead cuts
  nothing and leaves nothing behind;
* **a jump is explicit**: ``jump=1`` cuts epoch N above the newest at once if its condition holds
  (a resumed trainer that starts at epoch 7 while the cache holds epochs 0-2), as ``epochfs cut
  --epoch N`` does; nothing is queued, the client asks again; a jump of more than ``MAX_JUMP``
  (1,000) epochs is refused for good (``"final": true``: most often a step count passed as the
  epoch; an operator may cut it with ``epochfs cut --epoch N --far``), and a number above
  ``MAX_EPOCH`` (536,870,910, the view's inode numbers) is a 400;
* a request answered ``live`` records a read of the epoch (as a lookup does), dated ``read_ahead``
  seconds ahead: the supervisor passes the lead it gives the torch client's reports
  (:data:`~epochfs.sidecar.served_pins.CLIENT_AHEAD`, 40 s), because the asker is that client about
  to read. The epoch stays through the window after that date: before the folder view has shown it
  (a publisher behind a burst of cuts) and until the client's first report names it, whatever
  ``in_use_seconds`` (a window of a second could end before either). A folder view's showing
  records its own grace, from then.

Answers (JSON ``{"epoch", "state", "newest", "message"}``): 200 ``live`` (it is, or was just cut),
202 ``waiting`` (the next epoch, queued, or a jump whose condition does not hold yet: ask again),
409 ``refused`` (ahead of the next epoch without ``jump=1``), 410 ``gone`` (at or below the
newest and not live: retired, or never cut). Asking again after a 409 or a 410 will not help.

A cut this request makes is a wait to report (``epochfs_cut_wait_seconds``): the sampler reports
the cuts it makes for queued requests, so without this the histogram would count only the cuts
that had to wait, and its quantiles would say every cut waited. A cut made at once reports the
request's own time (a few milliseconds); one that ends a queued request's wait reports the time
since that request was queued, as the sampler would have.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from epochfs.sidecar.store import MAX_JUMP, EpochReader
from epochfs.sidecar.store.epochs import refused_full
from epochfs.sidecar.store.stats import DISK_FULL
from epochfs.torchclient.layout import EPOCH_PREFIX, MAX_EPOCH, parse_epoch_name


@dataclass(frozen=True)
class CutRequest:
    """One validated request: the epoch, and whether jumping above newest + 1 is asked for."""

    epoch: int
    jump: bool = False

    @classmethod
    def parse(cls, query: str) -> CutRequest:
        """From the query string (``epoch=N`` once, ``jump=1`` optional); ValueError says why not."""
        try:
            fields = parse_qs(query, keep_blank_values=True, strict_parsing=bool(query), max_num_fields=4)
        except ValueError as e:
            raise ValueError(f"malformed query: {e}") from None
        unknown = set(fields) - {"epoch", "jump"}
        if unknown:
            raise ValueError(f"unknown parameter(s): {', '.join(sorted(unknown))}")
        values = fields.get("epoch", [])
        if len(values) != 1:
            raise ValueError("give the epoch once: ?epoch=N")
        epoch = parse_epoch_name(EPOCH_PREFIX + values[0])
        if epoch is None:
            raise ValueError(f"epoch must be a canonical decimal from 0 to {MAX_EPOCH}, got {values[0]!r}")
        jumps = fields.get("jump", ["0"])
        if len(jumps) != 1 or jumps[0] not in ("0", "1"):
            raise ValueError("jump must be 1 (or 0) and given at most once")
        return cls(epoch=epoch, jump=jumps[0] == "1")

    def query(self) -> str:
        return f"epoch={self.epoch}" + ("&jump=1" if self.jump else "")


def _doc(req: CutRequest, state: str, newest: int | None, message: str) -> dict[str, Any]:
    return {"epoch": req.epoch, "state": state, "newest": newest, "message": message}


def answer(store: EpochReader, req: CutRequest, *,
           unpublished: Callable[[int], str | None] | None = None,
           cut_waited: Callable[[float], None] | None = None,
           read_ahead: float = 0.0) -> tuple[int, dict[str, Any]]:
    """Ask ``store`` for the cut ``req`` names; (HTTP status, JSON document) as described above.
    ``unpublished``: the folder view's reason a live epoch is not in the folder (its volume full);
    such an epoch is answered 202 ``waiting`` with that reason, not ``live``. ``cut_waited``: told
    the seconds a cut this request made waited (see the module's doc), never for a cut it found.
    ``store``: the view's interface to the store (:class:`~epochfs.sidecar.store.EpochReader`), as
    a lookup of the FUSE view asks it. ``read_ahead``: seconds ahead of now the read of an epoch
    answered ``live`` is dated (see the module's doc)."""
    status, doc, waited = _answer(store, req, read_ahead)
    if waited is not None and cut_waited is not None:
        cut_waited(waited)
    why = unpublished(req.epoch) if unpublished is not None and doc["state"] == "live" else None
    if why:
        return 202, {**doc, "state": "waiting",
                     "message": f"epoch {req.epoch} is cut but not published: {why}; ask again"}
    return status, doc


def _answer(store: EpochReader, req: CutRequest,
            read_ahead: float) -> tuple[int, dict[str, Any], float | None]:
    """:func:`answer`'s status and document, and the wait of the cut it made (None: no cut)."""
    asked = time.monotonic()
    n = req.epoch
    next_n = store.next_epoch()  # first: an epoch cut after this read is found live below
    live = {e.epoch for e in store.epochs()}
    newest = max(live) if live else None
    if n in live:
        store.record_read(n, now=time.time() + read_ahead)
        return 200, _doc(req, "live", newest, f"epoch {n} is live"), None
    if n < next_n:
        return 410, _doc(req, "gone", newest, f"epoch {n} is not live: it has retired, or it is below the "
                                              f"next epoch {next_n} and was never cut (epochs are only "
                                              "added above the newest)"), None
    if n > next_n and not req.jump:
        return 409, _doc(req, "refused", newest, f"only the next epoch ({next_n}) is cut on request; ask "
                                                 f"with jump=1 to cut epoch {n} (a resumed trainer)"), None
    if n > next_n + MAX_JUMP:
        why = (f"epoch {n} is {n - next_n:,} above the next epoch {next_n}: a jump of more than "
               f"{MAX_JUMP:,} epochs is refused (a step count passed as the epoch?); an operator may "
               f"cut it with epochfs cut --epoch {n} --far")
        return 409, {**_doc(req, "refused", newest, why), "final": True}, None
    if n > next_n:
        try:
            made = store.cut(n)
        except ValueError as e:  # another cut came first and n is below it now
            return 409, _doc(req, "refused", store.newest_epoch(), str(e)), None
        if made is None:
            why = (f"the cut condition for epoch {n} does not hold yet (min-samples, or its schedule "
                   "window); ask again")
            return 202, _doc(req, "waiting", newest, why), None
        waited = time.monotonic() - asked  # a jump is never queued: it waited for this request only
        store.record_read(n, now=time.time() + read_ahead)
        return 200, _doc(req, "live", n, f"epoch {n} cut (a jump from {next_n})"), waited
    # When n was queued (by this client's earlier request, or a lookup) the cut ends that wait.
    queued = dict(store.pending_cuts()).get(n)
    live_now, made = store.request_cut_made(n)
    if live_now:
        # Reported only by the request that made the cut: another rank's, or the sampler's, cut
        # found here is theirs to report.
        waited = time.time() - queued if queued is not None else time.monotonic() - asked
        store.record_read(n, now=time.time() + read_ahead)
        return 200, _doc(req, "live", n, f"epoch {n} is live"), max(0.0, waited) if made else None
    return 202, _doc(req, "waiting", newest, _waiting(store, n)), None


def _waiting(store: EpochReader, n: int) -> str:
    """Why the next epoch ``n`` is not cut yet, in the answer a trainer's wait shows: the cache's
    volume full (the request could not even be recorded, or sampling paused on it: its epoch
    would hold no sample), or a ``--min-samples`` the next epoch can never meet (the store's
    ``next_epoch`` warning, as ``status.json`` has it); else queued. "Queued" alone would be
    wrong for a request the full volume refused, and hides a wait that never ends."""
    refused = refused_full(store.root)
    if refused is not None:
        return (f"epoch {n} is not cut yet: the cache's volume is full, so its request could not "
                f"be recorded ({refused}); it is cut once room returns; ask again")
    stats = store.stats()
    if (warning := (stats.next_epoch or stats.first_epoch or {}).get("warning")) is not None:
        return f"epoch {n} is queued, but never cut: {warning}"
    if (stats.backpressure_reason or "").startswith(DISK_FULL):
        return (f"epoch {n} is queued: the cache's volume is full ({stats.backpressure_reason}); "
                "it is cut once room returns and its condition holds; ask again")
    return f"epoch {n} is queued: it is cut as soon as its condition holds (min-samples, or its " \
           "schedule window); ask again"
