"""What the fetch benchmark (:mod:`.fetch`) keeps of each run and prints of them all: the
:class:`Run` record, the table of medians with their spreads, and the ratios of the sampler to
each other tool.

Apart from :mod:`.fetch`, which uploads the datasets and runs the tools in turn: this part only
reads the runs once they are all made, so how they are summed up can be read, and changed,
without the upload and the run loop around it.
"""

from __future__ import annotations

import math
import os
import statistics
from dataclasses import dataclass

from epochfs.benchmarks import harness


@dataclass
class Run(harness.Rates):
    tool: str
    dataset: str
    checksum: str
    """What S3 stored to verify the objects by: ``crc64nvme`` (a full-object checksum) or ``md5``
    (only a plain md5 ETag)."""
    objects: int
    bytes: int
    seconds: float
    server_cpu_seconds: float
    steady_seconds: float | None = None
    """epochfs only: from the catalog being ready to the last sample (the sampler's start-up
    excluded; no ratio uses it: see ``from_first_object_seconds``)."""
    client_cpu_seconds: float = float("nan")
    """CPU (user + system) of the tool's process for the whole run, start-up and exit included."""
    first_get_seconds: float | None = None
    """From the tool's process start to the first GET the server received from it (a listing
    page), read from the server's request log; None against ``--endpoint``."""
    first_object_seconds: float | None = None
    """From the tool's process start to the first object GET the server received."""
    from_first_object_seconds: float | None = None
    """From the first object GET the server received from the tool to the run's end: the run with
    its start-up taken off, measured the same way for every tool (the sampler included; the
    ``steady_seconds`` the ratios used before took the sampler's start-up off and left the other
    tool's in); None against ``--endpoint``."""
    sync_seconds: float = 0.0
    """A ``sync`` right after the run: what writing back the tool's files took when the tool left
    them in the page cache (s5cmd, rclone); the sampler fsyncs each object before admitting it."""

    @property
    def objects_per_s(self) -> float:
        return self.per_s(self.objects)


def share(value: float) -> str:
    """A share of a core; "-" where none was measured (``--endpoint``: the server is not ours)."""
    return "-" if math.isnan(value) else f"{value:.0%}"


def after_start_up(mine: list[Run], theirs: list[Run], base: str) -> str:
    """The ratio with every tool's start-up taken off the same way: the median of each tool's
    runs from its first object GET (the server's request log) to its end, the other tool's over
    epochfs's. Dividing the other tool's whole run by the sampler's time after its start-up alone
    (what this said before) counted the other tool's start-up against it and not the sampler's."""
    ours = [r.from_first_object_seconds for r in mine if r.from_first_object_seconds is not None]
    others = [r.from_first_object_seconds for r in theirs if r.from_first_object_seconds is not None]
    if not ours or not others:
        return "no ratio after start-up (no request log: --endpoint)"
    a, b = statistics.median(ours), statistics.median(others)
    return (f"{harness.times(b / a)} from each tool's first object GET to its end (start-up taken "
            f"off both: epochfs {a:.2f}s, {base} {b:.2f}s)")


def chosen(runs: list[Run], name: str, checksum: str, tool: str) -> list[Run]:
    """The runs of one tool on one dataset stored with one checksum, in the order they ran."""
    return [r for r in runs if (r.tool, r.dataset, r.checksum) == (tool, name, checksum)]


CEILING = "download-path"
"""The tool that is epochfs's download path alone in a fresh process (:mod:`._fetch_alone`)."""

FLOOR = "python-floor"
"""The tool that is the least a Python process does for a durable, checked fetch (:mod:`._fetch_floor`)."""

REFERENCES = {
    CEILING: ("the download path alone in a fresh process",
              "the most epochfs sample could reach, process start included"),
    FLOOR: ("list, GET, CRC, direct write and fsync alone, in a fresh process",
            "what a Python process reaches doing only what every durable fetch must"),
}
"""Each reference tool (a part of the sampler's work, timed alone) and what its ratio tells."""


def reference_line(runs: list[Run], name: str, checksum: str, tool: str, base: str) -> str:
    """A reference tool (:data:`REFERENCES`) against ``base``, end to end, per pair of runs."""
    mine, theirs = chosen(runs, name, checksum, tool), chosen(runs, name, checksum, base)
    pairs = [b.seconds / m.seconds for m, b in zip(mine, theirs, strict=True)]
    ratio = statistics.median(r.seconds for r in theirs) / statistics.median(r.seconds for r in mine)
    what, tells = REFERENCES[tool]
    return (f"{name}: {tool} ({what}) / {base} = "
            f"{harness.times(ratio)} end to end (per pair {harness.times(min(pairs))}-"
            f"{harness.times(max(pairs))}): {tells}")


def print_summary(runs: list[Run], datasets: list[tuple[str, str]], tools: list[str],
                  alone: dict[tuple[str, str], list[float]], repeat: int) -> None:
    """Print the table of each tool's medians per dataset, then epochfs's ratio to each other tool
    (end to end, per pair of runs made back to back, after start-up, synced to disk) and each
    sampler's start-up; ``alone`` holds the in-process download path's wall times, the floor."""
    spread = harness.spread
    print()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; medians of {repeat} "
          f"alternating runs, [min-max] beside each")
    table = harness.Table(("dataset", "8s"), ("tool", "14s"), ("seconds", "20s"), ("MB/s", "8.1f"),
                          ("obj/s", "8.0f"), ("first GET s", "20s"), ("first object GET s", "20s"),
                          ("moto CPU", ">9s"), ("client CPU s", "13.2f"), ("checksum", "10s"))
    print(table.header())

    for name, checksum in datasets:
        for tool in tools:
            done = chosen(runs, name, checksum, tool)
            secs = statistics.median(r.seconds for r in done)
            cpu = statistics.median(r.server_cpu_seconds / r.seconds for r in done)
            client = statistics.median(r.client_cpu_seconds for r in done)
            med = Run(tool, name, checksum, done[0].objects, done[0].bytes, secs, cpu * secs)
            firsts = [r.first_get_seconds for r in done if r.first_get_seconds is not None]
            objects = [r.first_object_seconds for r in done if r.first_object_seconds is not None]
            print(table.row(name, tool, spread([r.seconds for r in done]), med.mb_per_s,
                            med.objects_per_s, spread(firsts, ".3f"), spread(objects, ".3f"),
                            share(cpu), client, checksum))
    print()
    if "epochfs" in tools:
        for name, checksum in datasets:
            unit = "bytes/s" if name == "large" else "objects/s"
            mine = chosen(runs, name, checksum, "epochfs")
            seconds = statistics.median(r.seconds for r in mine)
            for base in tools:
                if base == "epochfs":
                    continue
                theirs = chosen(runs, name, checksum, base)
                # Run i of each tool ran back to back (alternating order): one ratio per pair.
                pairs = [b.seconds / m.seconds for m, b in zip(mine, theirs, strict=True)]
                base_seconds = statistics.median(r.seconds for r in theirs)
                durable = (statistics.median(r.seconds + r.sync_seconds for r in theirs)
                           / statistics.median(r.seconds + r.sync_seconds for r in mine))
                print(f"{name} ({unit}): epochfs / {base} = {harness.times(base_seconds / seconds)} "
                      f"end to end (ratio of medians; per pair of runs "
                      f"{harness.times(min(pairs))}-{harness.times(max(pairs))}), "
                      f"{after_start_up(mine, theirs, base)}, {harness.times(durable)} with each "
                      f"run's files synced to disk after it; objects stored with {checksum}")
                if alone.get((name, checksum)) and base not in REFERENCES:
                    floor = statistics.median(alone[(name, checksum)])
                    print(f"{name}: the download path alone, in process (no process start, no "
                          f"sampler) / {base} = {harness.times(base_seconds / floor)}: once a "
                          f"process has started and listed")
                for reference in REFERENCES:
                    if reference in tools and base not in REFERENCES and not base.startswith("epochfs"):
                        print(reference_line(runs, name, checksum, reference, base))
            for sampler in (t for t in tools if t.startswith("epochfs")):
                done = chosen(runs, name, checksum, sampler)
                firsts = [r.first_get_seconds for r in done if r.first_get_seconds is not None]
                objects = [r.first_object_seconds for r in done if r.first_object_seconds is not None]
                if firsts:
                    print(f"{name}: {sampler} start-up to its first GET {spread(firsts, '.3f')} s, to "
                          f"its first object GET {spread(objects, '.3f')} s (process start to the "
                          f"server's request log)")
