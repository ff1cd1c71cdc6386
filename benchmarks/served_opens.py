"""What counting served samples (fanotify open events, ``sidecar/served.py``) costs a reader.

One run, same files: a reader opens and reads every file of a fake cache folder from the page cache,
with nothing watching (the baseline) and while an ``OpenCounter`` runs in another process (as the
supervisor does): ``--repeat`` passes each side, interleaved (unwatched, watched, then watched,
unwatched, and so on, so that a machine's drift reaches both sides alike), the counter started
before each watched pass and stopped after it. Prints each side's median opens per second with
the passes' [min-max], the ratio of the medians, and whether every open was counted. (It took the
best of ``--repeat`` watched passes against the best of twice as many unwatched ones, before and
after, and said "best of ``--repeat``" for both.)

    sudo epochfs bench served_opens --args --dir /var/tmp/epochfs-served --files 4000
    sudo .venv/bin/python -m epochfs.benchmarks.served_opens --files 4000

The files stay in ``--dir`` between runs (made again only where missing or of another size).
``--json`` writes the run as one row (every pass's seconds, the counts); ``--plot`` draws it, and
``python -m epochfs.benchmarks._served_opens_plot`` draws several runs' rows into one picture.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from epochfs.benchmarks import harness

LISTENER = """
import sys, time
from pathlib import Path
from epochfs.sidecar.served import OpenCounter
while (line := sys.stdin.readline()):
    expected, seen = int(line), [0]
    c = OpenCounter(objects_dir=Path(sys.argv[1]), on_open=lambda n, b: seen.__setitem__(0, seen[0] + n))
    assert c.start(), "fanotify unavailable (needs CAP_SYS_ADMIN)"
    print("ready", flush=True)
    sys.stdin.readline()
    deadline = time.monotonic() + 10
    while seen[0] < expected and time.monotonic() < deadline:
        time.sleep(0.05)
    c.stop()
    print(seen[0], flush=True)
"""
"""One ``OpenCounter`` per watched pass: a line with the opens to expect starts one ("ready"), the
next line ends the pass, and it answers the opens it counted (waiting up to 10 s for events
still queued)."""


def make_files(root: Path, count: int, size: int) -> list[Path]:
    files = []
    for i in range(count):
        fan = f"{i % 256:02x}"
        path = root / "objects" / fan / f"{fan}{i:030d}"
        if not path.exists() or path.stat().st_size != size:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(os.urandom(size))
        files.append(path)
    return files


def _read(files: list[Path]) -> None:
    for p in files:
        with open(p, "rb") as f:
            while f.read(1 << 20):
                pass


def read_all(files: list[Path]) -> float:
    """Seconds to open and read every file to the end."""
    return harness.timed(lambda: _read(files))[1]


def order(repeat: int) -> list[str]:
    """The passes' sides, interleaved and balanced: ``unwatched, watched, watched, unwatched, ...``
    (``repeat`` of each)."""
    pairs = [("unwatched", "watched") if i % 2 == 0 else ("watched", "unwatched") for i in range(repeat)]
    return [side for pair in pairs for side in pair]


def spread(n: int, seconds: list[float]) -> str:
    """``median [min-max]`` opens per second of passes over ``n`` files."""
    rates = sorted(n / s for s in seconds)
    return f"{n / statistics.median(seconds):10.0f} opens/s [{rates[0]:.0f}-{rates[-1]:.0f}]"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, default=Path("/var/tmp/epochfs-served"))
    ap.add_argument("--files", type=int, default=4000)
    ap.add_argument("--size", type=int, default=64 * 1024)
    ap.add_argument("--repeat", type=int, default=5, help="passes each side, interleaved (5)")
    ap.add_argument("--json", type=Path, help="also write the run here (a list of one row)")
    ap.add_argument("--plot", type=Path, help=harness.PLOT_HELP + ": watched / unwatched opens/s, "
                    "whiskers from the passes' spread")
    args = ap.parse_args(argv)
    files = make_files(args.dir, args.files, args.size)
    n = len(files)
    read_all(files)  # warm the page cache
    sides = order(args.repeat)
    passes: dict[str, list[float]] = {"unwatched": [], "watched": []}
    counted = 0
    listener = subprocess.Popen([*harness.PYTHON, "-c", LISTENER, str(args.dir / "objects")],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert listener.stdin is not None and listener.stdout is not None
        for side in sides:
            if side == "unwatched":
                passes[side].append(read_all(files))
                continue
            listener.stdin.write(f"{n}\n")
            listener.stdin.flush()
            if listener.stdout.readline().strip() != "ready":
                print("the listener failed to start (fanotify needs CAP_SYS_ADMIN)", file=sys.stderr)
                return 1
            passes[side].append(read_all(files))
            listener.stdin.write("\n")
            listener.stdin.flush()
            counted += int(listener.stdout.readline())
        listener.stdin.close()
        listener.wait()  # it ends by itself once its input ends
    finally:
        harness.stop(listener)  # only if it is still there (a failure above)
    base, watched = (statistics.median(passes[side]) for side in ("unwatched", "watched"))
    print(f"{n} files of {args.size} B, page cache warm, {args.repeat} pass{'es' * (args.repeat != 1)} "
          f"each side, interleaved; medians [min-max]:")
    print(f"  unwatched: {n / base:10.0f} opens/s  ({harness.mb_per_s(n * args.size, base):.0f} MB/s)")
    print(f"  watched:   {n / watched:10.0f} opens/s  ({harness.mb_per_s(n * args.size, watched):.0f} MB/s)")
    print(f"  watched / unwatched throughput: {base / watched:.2f}; "
          f"cost per open: {(watched - base) / n * 1e6:.1f} us")
    print(f"  opens counted: {counted} of {args.repeat * n}")
    print(f"  passes: unwatched {spread(n, passes['unwatched']).strip()}, "
          f"watched {spread(n, passes['watched']).strip()}")
    row = {"files": n, "size": args.size, "repeat": args.repeat, "order": sides,
           "unwatched_s": passes["unwatched"], "watched_s": passes["watched"],
           "unwatched_median_opens_per_s": n / base, "watched_median_opens_per_s": n / watched,
           "ratio_of_medians": base / watched, "us_per_open_of_medians": (watched - base) / n * 1e6,
           "counted": counted, "opens": args.repeat * n}
    if args.json:
        args.json.write_text(json.dumps([row], indent=1) + "\n")
    if args.plot:
        from epochfs.benchmarks import _served_opens_plot

        _served_opens_plot.write(args.plot, [row])
    return 0


if __name__ == "__main__":
    harness.entry(main, "served_opens")
