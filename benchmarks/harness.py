"""What the benchmarks share: dependencies, processes, mounts, a local S3 server, CPU and timing
accounting, scratch folders and the printing of tables and ratios.

- **Dependencies** (:mod:`._dependencies`, its names re-exported here): a missing Python module or
  program stops a benchmark at once with exit status 2 and a line naming what to install (``pip
  install 'epochfs[bench]'``, or the system package).
- **Processes**: :func:`running` starts a command (its output in a log file, or discarded), waits
  until ``ready()`` holds (failing early, with the log's tail, when the process exits or the time is
  up), and on the way out always calls :func:`stop`: SIGTERM, a wait, SIGKILL if it is still there,
  then a lazy unmount of whatever it left mounted.
- **S3**: :func:`moto_server` runs moto on a free port of 127.0.0.1 for a ``with`` block; the
  credentials, clients, uploads and rclone settings that reach it are here too.
- **Accounting** (:mod:`._accounting`, its names re-exported here): CPU seconds of this process, its
  reaped children or any process (from /proc), :func:`timed`, :func:`mb_per_s` (decimal MB, 1e6
  bytes, in every benchmark) and :class:`Rates`.
- **Scratch**: :func:`work_dir`, a temp folder of the run's own (in ``--dir`` when given), removed
  after with any mount left below it detached first; nothing it did not make is ever removed.
- **Signals** (:mod:`._signals`, its names re-exported here): :func:`entry`, every benchmark's entry:
  SIGTERM cleans up as Ctrl-C does (the ``finally`` blocks run: servers stopped, mounts detached,
  scratch removed), exit status 128 + the signal; :func:`signals_held`, a block a signal does not cut
  in two; :func:`fork_pool`, a reader pool whose workers are all gone after its ``with`` block.
- **Output**: :class:`Table` (a header and rows from one list of column formats) and :func:`times`,
  the ``0.97x`` of every ratio printed (:mod:`._output`, re-exported here), :func:`spread`, the
  ``median [min-max]`` of every result shown, and the files a benchmark writes
  (:func:`write_results`, :func:`write_plot`, ``--plot``'s :data:`PLOT_HELP`).

Every benchmark calls all of these as ``harness.<name>``: one import for what they share.

Standard library and ``epochfs.fuse.mounting`` (no mfusepy) only: boto3 is imported when used.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from epochfs.benchmarks._accounting import Rates as Rates
from epochfs.benchmarks._accounting import children_cpu as children_cpu
from epochfs.benchmarks._accounting import cpu_seconds as cpu_seconds
from epochfs.benchmarks._accounting import mb_per_s as mb_per_s
from epochfs.benchmarks._accounting import self_cpu as self_cpu
from epochfs.benchmarks._accounting import timed as timed
from epochfs.benchmarks._dependencies import fail as fail
from epochfs.benchmarks._dependencies import missing_module as missing_module
from epochfs.benchmarks._dependencies import program as program
from epochfs.benchmarks._dependencies import require as require
from epochfs.benchmarks._output import Table as Table
from epochfs.benchmarks._output import times as times
from epochfs.benchmarks._signals import clean_up_on_sigterm as clean_up_on_sigterm
from epochfs.benchmarks._signals import entry as entry
from epochfs.benchmarks._signals import fork_pool as fork_pool
from epochfs.benchmarks._signals import signals_held as signals_held
from epochfs.fuse.mounting import canonical, find_mount, is_dead, lazy_unmount, mount_table

PYTHON = [sys.executable, "-P"]
"""This Python for the processes a benchmark starts, with nothing imported from the working folder
(an ``epochfs`` folder there would be imported instead of the installed package)."""

EPOCHFS = [*PYTHON, "-m", "epochfs.sidecar.cli"]
"""The ``epochfs`` command of this installation."""


def spread(values: Sequence[float], fmt: str = ".2f") -> str:
    """``median [min-max]`` of ``values``: a result is a median shown with its spread, never the best
    run alone (the best of N hides how far apart the runs were)."""
    return (f"{statistics.median(values):{fmt}} [{min(values):{fmt}}-{max(values):{fmt}}]"
            if values else "-")


PLOT_HELP = "also draw the results into this PNG (matplotlib: pip install 'epochfs[bench]')"
"""The help of every benchmark's ``--plot FILE.png``."""


def write_results(table: str, results: Sequence[Any], *, markdown: Path | None,
                  json_path: Path | None, plot: Path | None = None, kind: str = "") -> None:
    """The benchmark's markdown tables, its results (dataclasses) as JSON and drawn as ``kind``
    into a PNG, where asked for."""
    if markdown:
        markdown.write_text(table + "\n")
    if json_path:
        json_path.write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")
    write_plot(plot, kind, [asdict(r) for r in results])


def write_plot(path: Path | None, kind: str, rows: Sequence[Mapping[str, Any]]) -> None:
    """``rows`` (as the benchmark's JSON has them) drawn as ``kind`` into the PNG ``path`` when one
    is given: matplotlib is imported only then (:mod:`._plots`), so no benchmark needs it otherwise."""
    if path:
        from epochfs.benchmarks import _plots

        _plots.write(kind, rows, path)


# ---------------------------------------------------------------------------------- processes
def free_port() -> int:
    """A TCP port of 127.0.0.1 nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def log_tail(log: Path | None, chars: int = 2000) -> str:
    if log is None or not log.exists():
        return ""
    return ":\n" + log.read_text(errors="replace")[-chars:]


def start(cmd: Sequence[str], *, log: Path | None = None,
          env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start ``cmd`` with stdout and stderr in ``log``, or discarded without one."""
    if log is None:
        return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    with open(log, "wb") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)


def wait_ready(proc: subprocess.Popen[Any], ready: Callable[[], bool], *, what: str, timeout: float = 30.0,
               interval: float = 0.1, log: Path | None = None) -> None:
    """Poll ``ready()`` until it holds; fail with the log's tail if ``proc`` exits or ``timeout`` passes.

    A start-up poll, never part of a measurement.
    """
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None:
            fail(f"{what} exited with status {proc.returncode}{log_tail(log)}")
        if time.monotonic() > deadline:
            fail(f"{what} was not ready within {timeout:.0f} s{log_tail(log)}")
        time.sleep(interval)


def stop(proc: subprocess.Popen[Any], *, timeout: float = 30.0, unmount: Iterable[Path] = ()) -> None:
    """SIGTERM, up to ``timeout`` s for it to exit, SIGKILL if it has not; then lazily unmount each
    path of ``unmount`` that is still a mount point (a server killed mid-way leaves its mounts)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    for path in unmount:
        if find_mount(path) is not None:
            lazy_unmount(path, any_kind=True)  # only places below the benchmark's own work folder


@contextlib.contextmanager
def running(cmd: Sequence[str], *, what: str, ready: Callable[[], bool] | None = None,
            timeout: float = 30.0, interval: float = 0.1, log: Path | None = None,
            env: Mapping[str, str] | None = None, stop_timeout: float = 30.0,
            unmount: Iterable[Path] = ()) -> Iterator[subprocess.Popen[bytes]]:
    """``cmd`` running (and ready) for the length of a ``with`` block, stopped by :func:`stop` after it
    (started with signals held: a SIGTERM as it starts is raised once the ``finally`` holds it)."""
    proc: subprocess.Popen[bytes] | None = None
    try:
        with signals_held():
            proc = start(cmd, log=log, env=env)
        if ready is not None:
            wait_ready(proc, ready, what=what, timeout=timeout, interval=interval, log=log)
        yield proc
    finally:
        if proc is not None:
            stop(proc, timeout=stop_timeout, unmount=unmount)


def mounted(path: Path) -> bool:
    """A live FUSE mount answers at ``path`` (the readiness of every mounting command here)."""
    entry = find_mount(path)
    return entry is not None and entry.fstype.startswith("fuse") and not is_dead(path)


def unmount_below(folder: Path) -> None:
    """Lazily unmount everything mounted below ``folder``, the innermost first."""
    top = canonical(folder) + os.sep
    for mount in reversed(mount_table()):
        if mount.mount_point.startswith(top):
            lazy_unmount(Path(mount.mount_point), any_kind=True)


# ---------------------------------------------------------------------------------- scratch
DIR_HELP = ("a folder in which the run makes its own scratch folder and removes it afterwards; "
            "nothing else in it is touched")
"""The help of every benchmark's ``--dir`` (:func:`work_dir`'s ``parent``), its default after it."""


@contextlib.contextmanager
def work_dir(parent: Path | None = None, *, prefix: str = "epochfs-bench-") -> Iterator[Path]:
    """A new scratch folder of this run's own for a ``with`` block, made in ``parent`` (a place the
    user chose with ``--dir``, such as the disk under test; made if missing) or in the system's temp
    folder; removed afterwards, mounts below it detached first.

    Only what the run made is removed: ``--dir`` is a folder of the user's (``--dir ~/data`` once
    wiped ``~/data`` when the given folder itself was the scratch), so it is never emptied, and
    removed afterwards only when this call made it and it is empty again."""
    made = parent is not None and not parent.exists()
    if parent is not None:
        parent.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    try:
        yield folder
    finally:
        unmount_below(folder)
        shutil.rmtree(folder, ignore_errors=True)
        if made and parent is not None:
            with contextlib.suppress(OSError):
                parent.rmdir()  # only when empty: nothing of anyone else's


# ---------------------------------------------------------------------------------- S3 (moto)
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
}


def s3_env() -> dict[str, str]:
    """The environment of every S3 tool: test credentials, no custom CA bundle (plain http here;
    rclone refuses AWS_CA_BUNDLE with its own transport)."""
    env = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"}
    env.update(CREDENTIALS)
    return env


def rclone_env(remote: str, endpoint: str) -> dict[str, str]:
    """Variables that define the rclone remote ``remote`` (upper case) on ``endpoint``, no config file."""
    prefix = f"RCLONE_CONFIG_{remote.upper()}_"
    return {prefix + k: v for k, v in {
        "TYPE": "s3", "PROVIDER": "Other", "ENDPOINT": endpoint,
        "ACCESS_KEY_ID": CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "SECRET_ACCESS_KEY": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        "REGION": "us-east-1", "FORCE_PATH_STYLE": "true"}.items()}


@dataclass
class Moto:
    proc: subprocess.Popen[bytes]
    endpoint: str


def answers(url: str) -> bool:
    """Whether ``url`` answers a GET with a success (a readiness probe of a server we started)."""
    try:
        urllib.request.urlopen(url, timeout=1).read()
    except OSError:
        return False
    return True


class RequestLog:
    """WSGI middleware that writes one line per request to a file as the server receives it:
    ``<time.monotonic()> <method> <path>``. The clock is the system's monotonic one, shared by
    every process of the machine, so a benchmark compares it with its own: a tool's start-up to
    its first request, measured where the request arrives rather than guessed."""

    def __init__(self, app: Callable[..., Any], path: str) -> None:
        self.app = app
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        line = f"{time.monotonic():.6f} {environ.get('REQUEST_METHOD', '')} {environ.get('PATH_INFO', '')}\n"
        os.write(self.fd, line.encode())  # one write of a line, O_APPEND: whole lines from any thread
        return self.app(environ, start_response)


def logged_requests(path: Path, since: float) -> list[tuple[float, str, str]]:
    """The requests of a :class:`RequestLog` file received at or after ``since``: (time, method,
    path), oldest first."""
    found: list[tuple[float, str, str]] = []
    if not path.exists():
        return found
    for line in path.read_text().splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3 and float(parts[0]) >= since:
            found.append((float(parts[0]), parts[1], parts[2]))
    return sorted(found)


MOTO_LISTEN_BACKLOG = 1024
"""The benchmark's moto accepts this many connections not yet taken by its accept loop (werkzeug's
own is 128). s5cmd opens a connection per object of a set at once (its 256 workers): at 128 the
kernel dropped a few of its SYNs in about a third of its runs (``TcpExtListenOverflows``), each
retried after the kernel's one-second SYN timeout, and those runs took 1.2-1.4 s against 0.77 s,
a stall of the local store that a real S3 endpoint does not have."""

_MOTO = """
import sys
import moto.server
import werkzeug.serving
host, port, backlog, path = sys.argv[1:5]
werkzeug.serving.BaseWSGIServer.request_queue_size = int(backlog)
if path:
    from epochfs.benchmarks.harness import RequestLog
    serve = moto.server.run_simple
    moto.server.run_simple = lambda h, p, app, **kw: serve(h, p, RequestLog(app, path), **kw)
moto.server.main(["-H", host, "-p", port])
"""


@contextlib.contextmanager
def moto_server(log: Path | None = None, *, requests: Path | None = None) -> Iterator[Moto]:
    """A moto S3 server on a free port of 127.0.0.1, answering, for the length of a ``with`` block,
    its listen backlog :data:`MOTO_LISTEN_BACKLOG`; with ``requests``, every request it receives is
    logged there (:class:`RequestLog`)."""
    require("moto", "flask", "flask_cors")
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    cmd = [*PYTHON, "-c", _MOTO, "127.0.0.1", str(port), str(MOTO_LISTEN_BACKLOG),
           "" if requests is None else str(requests)]
    with running(cmd, what="moto", ready=lambda: answers(endpoint + "/"), log=log) as proc:
        yield Moto(proc, endpoint)


def s3_client(endpoint: str) -> Any:
    require("boto3")
    import boto3

    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1")


def put_objects(endpoint: str, bucket: str, count: int, item: Callable[[int], tuple[str, bytes]], *,
                threads: int = 8) -> int:
    """Upload ``item(i)`` (key, body) for i below ``count`` into ``bucket`` (made if missing), on
    ``threads`` threads, each body made on the thread that sends it; returns the bytes sent."""
    client = s3_client(endpoint)
    if bucket not in [b["Name"] for b in client.list_buckets().get("Buckets", [])]:
        client.create_bucket(Bucket=bucket)

    def put(i: int) -> int:
        key, body = item(i)
        client.put_object(Bucket=bucket, Key=key, Body=body)
        return len(body)

    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        return sum(pool.map(put, range(count)))
