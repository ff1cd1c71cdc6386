"""What the benchmarks share: dependencies, processes, mounts, a local S3 server, CPU and timing
accounting, scratch folders and the printing of tables and ratios.

- **Dependencies**: a missing Python module or program stops a benchmark at once with exit status 2
  and a line naming what to install (``pip install 'epochfs[bench]'``, or the system package).
- **Processes**: :func:`running` starts a command (its output in a log file, or discarded), waits
  until ``ready()`` holds (failing early, with the log's tail, when the process exits or the time is
  up), and on the way out always calls :func:`stop`: SIGTERM, a wait, SIGKILL if it is still there,
  then a lazy unmount of whatever it left mounted.
- **S3**: :func:`moto_server` runs moto on a free port of 127.0.0.1 for a ``with`` block; the
  credentials, clients, uploads and rclone settings that reach it are here too.
- **Accounting**: CPU seconds of this process, its reaped children or any process (from /proc),
  :func:`timed`, :func:`mb_per_s` (decimal MB, 1e6 bytes, in every benchmark) and :class:`Rates`.
- **Scratch**: :func:`work_dir`, a temp folder or a fixed one, emptied before and removed after, with
  any mount left below it detached first.
- **Output**: :class:`Table` (a header and rows from one list of column formats) and :func:`times`,
  the ``0.97x`` of every ratio printed.

Standard library and ``epochfs.fuse.mounting`` (no mfusepy) only: boto3 is imported when used.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import importlib.util
import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from epochfs.fuse.mounting import canonical, find_mount, is_dead, lazy_unmount, mount_table

T = TypeVar("T")

INSTALL = "pip install 'epochfs[bench]'"
"""What brings every Python dependency of the benchmarks (pyproject.toml's ``bench`` extra)."""

DISTRIBUTION = {"moto": "moto[server]", "flask": "moto[server]", "flask_cors": "moto[server]"}
"""The requirement that provides an import name, where the two differ."""

PYTHON = [sys.executable, "-P"]
"""This Python for the processes a benchmark starts, with nothing imported from the working folder
(an ``epochfs`` folder there would be imported instead of the installed package)."""

EPOCHFS = [*PYTHON, "-m", "epochfs.sidecar.cli"]
"""The ``epochfs`` command of this installation."""

PROGRAM_SOURCE = {"epochfs": "pip install epochfs", "s5cmd": INSTALL, "rclone": "apt-get install rclone",
                  "s3fs": "apt-get install s3fs"}
"""Where each program the benchmarks run comes from (``make bench`` installs the system ones)."""


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


# ---------------------------------------------------------------------------------- dependencies
def fail(message: str) -> NoReturn:
    """Stop the benchmark: ``message`` on stderr, exit status 2 (what ``epochfs`` uses for setup errors)."""
    print(f"epochfs bench: {message}", file=sys.stderr, flush=True)
    raise SystemExit(2)


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module without a spec
        return False


def require(*modules: str) -> None:
    """Fail, naming the extra, unless every module (import name) is installed."""
    missing = sorted({DISTRIBUTION.get(m, m) for m in modules if not _installed(m)})
    if missing:
        fail(f"needs {', '.join(missing)}, not installed here: {INSTALL}")


def missing_module(error: ModuleNotFoundError) -> NoReturn:
    """For a benchmark's guarded imports: ``except ModuleNotFoundError as e: harness.missing_module(e)``."""
    name = (error.name or str(error)).split(".")[0]
    if name == "epochfs":
        raise error  # a module of epochfs itself: a broken installation, not a missing dependency
    fail(f"needs {DISTRIBUTION.get(name, name)}, not installed here: {INSTALL}")


def program(name: str) -> str:
    """The path of a program: this Python's own bin folder first (pip puts s5cmd there), then PATH."""
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if found is None:
        fail(f"needs the program {name}, not found: {PROGRAM_SOURCE.get(name, 'install it')}")
    return found


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
    """``cmd`` running (and ready) for the length of a ``with`` block, stopped by :func:`stop` after it."""
    proc = start(cmd, log=log, env=env)
    try:
        if ready is not None:
            wait_ready(proc, ready, what=what, timeout=timeout, interval=interval, log=log)
        yield proc
    finally:
        stop(proc, timeout=stop_timeout, unmount=unmount)


def mounted(path: Path) -> bool:
    """A live FUSE mount answers at ``path`` (the readiness of every mounting command here)."""
    entry = find_mount(path)
    return entry is not None and entry.fstype.startswith("fuse") and not is_dead(path)


def unmount_below(folder: Path) -> None:
    """Lazily unmount everything mounted below ``folder``, the innermost first."""
    top = canonical(folder) + os.sep
    for entry in reversed(mount_table()):
        if entry.mount_point.startswith(top):
            lazy_unmount(Path(entry.mount_point), any_kind=True)


# ---------------------------------------------------------------------------------- scratch
@contextlib.contextmanager
def work_dir(path: Path | None = None, *, prefix: str = "epochfs-bench-",
             parent: Path | None = None) -> Iterator[Path]:
    """A scratch folder for a ``with`` block: ``path`` emptied first when given (a fixed place, such
    as the disk under test), else a new temp folder in ``parent`` (default: the system's temp folder).
    Removed afterwards, mounts below it detached first."""
    if path is not None:
        if path.exists():
            unmount_below(path)
            shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True, exist_ok=True)
        folder = path
    else:
        folder = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    try:
        yield folder
    finally:
        unmount_below(folder)
        shutil.rmtree(folder, ignore_errors=True)


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


_MOTO_WITH_REQUEST_LOG = """
import sys
import moto.server
from epochfs.benchmarks.harness import RequestLog
host, port, path = sys.argv[1:4]
serve = moto.server.run_simple
moto.server.run_simple = lambda h, p, app, **kw: serve(h, p, RequestLog(app, path), **kw)
moto.server.main(["-H", host, "-p", port])
"""


@contextlib.contextmanager
def moto_server(log: Path | None = None, *, requests: Path | None = None) -> Iterator[Moto]:
    """A moto S3 server on a free port of 127.0.0.1, answering, for the length of a ``with`` block;
    with ``requests``, every request it receives is logged there (:class:`RequestLog`)."""
    require("moto", "flask", "flask_cors")
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    cmd = ([*PYTHON, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)] if requests is None
           else [*PYTHON, "-c", _MOTO_WITH_REQUEST_LOG, "127.0.0.1", str(port), str(requests)])
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


# ---------------------------------------------------------------------------------- accounting
def cpu_seconds(pid: int | None, *, children: bool = True) -> float:
    """utime + stime of a process from /proc, with ``children`` those of its reaped children too
    (nan without a pid; OSError once the process is gone)."""
    if pid is None:
        return float("nan")
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(x) for x in fields[11:(15 if children else 13)])
    return ticks / os.sysconf("SC_CLK_TCK")


def self_cpu() -> float:
    """User + system CPU seconds of this process (all its threads)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def children_cpu() -> float:
    """User + system CPU seconds of this process's terminated and waited-for children."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(fn: Callable[[], T]) -> tuple[T, float]:
    """``fn()`` and the seconds it took (``time.perf_counter``)."""
    started = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - started


def mb_per_s(nbytes: float, seconds: float) -> float:
    """Decimal megabytes (1e6 bytes) per second."""
    return nbytes / seconds / 1e6


class Rates:
    """For a result class (a dataclass with ``bytes`` and ``seconds`` fields): its rates."""

    bytes: int
    seconds: float

    @property
    def mb_per_s(self) -> float:
        return mb_per_s(self.bytes, self.seconds)

    def per_s(self, count: float) -> float:
        return count / self.seconds


# ---------------------------------------------------------------------------------- output
def times(ratio: float) -> str:
    """A ratio as every benchmark prints it: ``0.97x``."""
    return f"{ratio:.2f}x"


class Table:
    """Rows of values under a header, columns joined by one space. Each column is (title, format
    spec of its values: ``8s``, ``>9.2f``, ``9.0%``); a title takes its column's width and alignment
    (the spec's, else left for text and right for numbers, as format() aligns values)."""

    def __init__(self, *columns: tuple[str, str]) -> None:
        self.columns = columns

    def header(self) -> str:
        heads = []
        for title, spec in self.columns:
            m = re.fullmatch(r"([<>^]?)(\d*).*?([a-z%]?)", spec)
            align, width, kind = m.groups() if m else ("", "", "")
            heads.append(f"{title:{align or ('<' if kind == 's' else '>')}{width}}")
        return " ".join(heads)

    def row(self, *values: object) -> str:
        return " ".join(f"{v:{spec}}" for (_, spec), v in zip(self.columns, values, strict=True))
