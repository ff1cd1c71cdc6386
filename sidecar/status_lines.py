"""Lines of ``epochfs status``'s view that need words of their own: the listing's coverage, the
rates between two readings (and the rates themselves, :func:`rates`) and the epochs table
(:mod:`epochfs.sidecar.status` draws the rest).

Why a module apart: :mod:`.status` reached its size bound, and these two lines are where the view
said more than it knew: a listing with no estimate yet read "0 of about 0 keys seen (0.0%)", and
the trainer's wait, a sum over the pod's ranks, was capped at 100% as if one rank reported it.
"""

from __future__ import annotations

from typing import Any

from epochfs.sidecar.config import format_size
from epochfs.sidecar.status_estimate import per_second


def listing_lines(listing: dict[str, Any]) -> list[str]:
    """The listing's lines from ``status.json``'s ``listing``: failing, its coverage while under
    way (what is known only: keys seen without an estimate of the total read as such, none as
    "no page listed yet"), complete, or keys left out by ``--include``/``--exclude``."""
    lines: list[str] = []
    if listing.get("failing"):
        lines.append(f"listing: failing, tried again with a growing pause (sampling goes on): "
                     f"{listing['failing']}")
    if listing and not listing.get("complete"):
        listed, estimated = int(listing.get("listed") or 0), int(listing.get("estimated") or 0)
        if estimated > 0:
            seen = (f"{listed:,} of about {estimated:,} keys seen "
                    f"({100 * float(listing.get('covered') or 0):.1f}%)")
        elif listed > 0:
            seen = f"{listed:,} keys seen (no estimate of the total yet)"
        else:
            seen = "no page listed yet"
        spans, got = int(listing.get("spans") or 0), int(listing.get("spans_reached") or 0)
        reached = f", {got} of {spans} folder(s) reached" if spans else ""
        if estimated > 0 and 0 < got < spans:
            # Such a folder may hold most keys: the estimate counts it at the reached ones' average.
            reached += " (the others counted at the reached ones' average size until reached)"
        lines.append(f"listing: {seen}{reached}"
                     + (": epochs cut now sample what is listed so far" if listed else ""))
    elif listing.get("warning"):
        lines.append(f"listing: complete; WARNING: {listing['warning']}")
    elif listing.get("complete"):
        lines.append("listing: complete (epochs sample the whole dataset)"
                     + ("; listing it again now" if listing.get("relisting") else ""))
    if listing.get("excluded") and not listing.get("warning"):
        lines.append(f"listing: {int(listing['excluded']):,} key(s) left out by --include/--exclude")
    return lines


def in_flight_words(reserved: int, received: int) -> str:
    """The cache line's end: ``, 1.0 GiB in flight``, and what those downloads have received so
    far once they have (``, 480.0 MiB of 1.0 GiB in flight downloaded``: a large object's)."""
    if not reserved:
        return ""
    if not received:
        return f", {format_size(reserved)} in flight"
    return f", {format_size(min(received, reserved))} of {format_size(reserved)} in flight downloaded"


def wait_words(seconds_per_second: float) -> str:
    """The trainer's wait, from the rate of ``client_wait_seconds_total``: the sidecar sums the
    reports of all the pod's ranks and cannot tell how many there are (a report names no rank;
    the dashboard and the alert divide by the accelerators the pod requests, which kube-state-metrics
    knows and the sidecar does not). So the seconds waited per second, said to be a sum, never
    capped: 8 ranks each waiting 20% show 1.60, not "100% of the time"."""
    return (f"trainer wait {seconds_per_second:.2f} s per s summed over the pod's ranks "
            f"(each rank's share of its time: this / ranks)")


def rates(prev: dict[str, Any], cur: dict[str, Any], seconds: float) -> dict[str, float]:
    """Per-second rates of the counters present in both readings (never negative: a reset of a
    counter, e.g. a wiped cache, reads as 0 rather than a negative rate). The fetch's bytes count
    the bytes the downloads in flight have received (``inflight_downloaded_bytes``) too."""
    dt = max(1e-6, seconds)

    def rate(key: str, scale: float = 1.0) -> float | None:
        if key not in prev or key not in cur:
            return None
        return max(0.0, (float(cur[key]) - float(prev[key])) / dt / scale)

    out: dict[str, float] = {}
    received, fetched = "inflight_downloaded_bytes", "fetched_bytes_total"
    if all(key in doc for doc in (prev, cur) for key in (received, fetched)):
        prev, cur = ({**doc, fetched: int(doc[fetched]) + int(doc[received])} for doc in (prev, cur))
    for label, key, scale in (
        ("fetch MB/s", "fetched_bytes_total", 1e6),
        ("fetch samples/s", "fetched_total", 1.0),
        ("serve MB/s", "served_bytes_total", 1e6),
        ("serve samples/s", "served_samples_total", 1.0),
        ("evict samples/s", "evicted_total", 1.0),
        ("skips/s", "skipped_total", 1.0),
        ("trainer wait", "client_wait_seconds_total", 1.0),
    ):
        value = rate(key, scale)
        if value is not None:
            out[label] = value
    return out


def fmt_rates(r: dict[str, float]) -> str:
    """``rates: fetch 2.1 MiB/s  ...`` from :func:`rates`."""
    parts = []
    for label, value in r.items():
        if label == "trainer wait":
            parts.append(wait_words(value))
        elif label.endswith(" MB/s"):
            parts.append(f"{label[:-len(' MB/s')]} {per_second(value * 1e6)}")
        else:
            parts.append(f"{label} {value:.1f}")
    return "rates: " + "  ".join(parts)


def pin_words(e: dict[str, Any]) -> str:
    """The ``pinned`` cell of one epoch: why it is pinned (``kept``, ``in use``, ``kept, in use``,
    from ``pinned_by``) or ``no``; ``yes`` for a document that says only ``pinned``."""
    why = e.get("pinned_by")
    if isinstance(why, list):
        return ", ".join(str(w) for w in why) or "no"
    return "yes" if e.get("pinned") else "no"


def epoch_lines(epochs: list[dict[str, Any]]) -> list[str]:
    """The epochs table: each live epoch's samples, ``new`` (not in the epoch before),
    ``left out`` (the epoch before's samples not in this one: turned over, which is not the
    cache's eviction count; JSON ``evicted``), bytes and, where the document says (``--cache``:
    :func:`~epochfs.sidecar.status_facts.mark_pins`), whether it is pinned and why: ``kept``
    (among the newest ``--keep-epochs``) and/or ``in use`` (read within ``--in-use-seconds``);
    either way it stays and its samples are not evicted. A document without ``pinned``
    (``status.json``, another version) has no such column."""
    pins = any("pinned" in e for e in epochs)
    # As wide as the largest number shown (epochs go up to 536,870,910), at least the header's.
    width = max([6, *(len(str(e.get("epoch", "?"))) for e in epochs)])
    cells = [pin_words(e) for e in epochs]
    # The last column, left-aligned: its words differ in length ("kept, in use", "no").
    lines = [f"{'epoch':>{width}} {'samples':>9} {'new':>7} {'left out':>8} {'bytes':>12}"
             + (" pinned" if pins else "")]
    for e, cell in zip(epochs, cells, strict=True):
        lines.append(
            f"{e.get('epoch', '?'):>{width}} {e.get('samples', '?'):>9} {e.get('new', 0):>7} "
            f"{e.get('evicted', 0):>8} {format_size(int(e.get('bytes') or 0)):>12}"
            + (f" {cell}" if pins else ""))
    if epochs:
        pinned = ("; pinned: kept (among the newest --keep-epochs) and/or in use (read, or restored "
                  "by an index rebuild, within --in-use-seconds): it stays and its samples are not evicted")
        lines.append("  (new: samples not in the epoch before; left out: samples of the epoch before not in "
                     "this one" + (pinned if pins else "") + ")")
    return lines
