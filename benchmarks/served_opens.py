"""What counting served samples (fanotify open events, ``sidecar/served.py``) costs a reader.

One run, same files: a reader opens and reads every file of a fake cache folder from the page cache,
first with nothing watching (the baseline), then while an ``OpenCounter`` runs in another process
(as the supervisor does), then unwatched again; the best of ``--repeat`` passes each. Prints the
opens per second of each, the ratio, and whether every open was counted.

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
import subprocess
import sys
from pathlib import Path

from epochfs.benchmarks import harness

LISTENER = """
import sys, time
from pathlib import Path
from epochfs.sidecar.served import OpenCounter
seen = [0]
c = OpenCounter(objects_dir=Path(sys.argv[1]), on_open=lambda n, b: seen.__setitem__(0, seen[0] + n))
assert c.start(), "fanotify unavailable (needs CAP_SYS_ADMIN)"
print("ready", flush=True)
sys.stdin.readline()
deadline = time.monotonic() + 10
while seen[0] < int(sys.argv[2]) and time.monotonic() < deadline:
    time.sleep(0.05)
c.stop()
print(seen[0], flush=True)
"""


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, default=Path("/var/tmp/epochfs-served"))
    ap.add_argument("--files", type=int, default=4000)
    ap.add_argument("--size", type=int, default=64 * 1024)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", type=Path, help="also write the run here (a list of one row)")
    ap.add_argument("--plot", type=Path, help=harness.PLOT_HELP + ": watched / unwatched opens/s, "
                    "whiskers from the passes' spread")
    args = ap.parse_args(argv)
    files = make_files(args.dir, args.files, args.size)
    read_all(files)  # warm the page cache
    passes = [read_all(files) for _ in range(args.repeat)]  # unwatched: before, then after
    listener = subprocess.Popen(
        [*harness.PYTHON, "-c", LISTENER, str(args.dir / "objects"), str(args.repeat * len(files))],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert listener.stdin is not None and listener.stdout is not None
        if listener.stdout.readline().strip() != "ready":
            print("the listener failed to start (fanotify needs CAP_SYS_ADMIN)", file=sys.stderr)
            return 1
        watched_passes = [read_all(files) for _ in range(args.repeat)]
        watched = min(watched_passes)
        listener.stdin.write("\n")
        listener.stdin.flush()
        counted = int(listener.stdout.readline())
        listener.wait()  # it ends by itself once it has reported
    finally:
        harness.stop(listener)  # only if it is still there (a failure above)
    passes += [read_all(files) for _ in range(args.repeat)]
    base = min(passes)
    n = len(files)
    print(f"{n} files of {args.size} B, page cache warm, best of {args.repeat}:")
    print(f"  unwatched: {n / base:10.0f} opens/s  ({harness.mb_per_s(n * args.size, base):.0f} MB/s)")
    print(f"  watched:   {n / watched:10.0f} opens/s  ({harness.mb_per_s(n * args.size, watched):.0f} MB/s)")
    print(f"  watched / unwatched throughput: {base / watched:.2f}; "
          f"cost per open: {(watched - base) / n * 1e6:.1f} us")
    print(f"  opens counted: {counted} of {args.repeat * n}")
    row = {"files": n, "size": args.size, "repeat": args.repeat, "unwatched_s": passes,
           "watched_s": watched_passes, "unwatched_opens_per_s": n / base, "watched_opens_per_s": n / watched,
           "ratio": base / watched, "us_per_open": (watched - base) / n * 1e6, "counted": counted,
           "opens": args.repeat * n}
    if args.json:
        args.json.write_text(json.dumps([row], indent=1) + "\n")
    if args.plot:
        from epochfs.benchmarks import _served_opens_plot

        _served_opens_plot.write(args.plot, [row])
    return 0


if __name__ == "__main__":
    sys.exit(main())
