"""Issue 21: every user error of the CLI fails fast, with exit status 2 and one line naming the flag
and the reason, never a traceback. Run through the real ``epochfs`` console script in a subprocess.

Each test here failed before its fix: a sub-command's unknown flag answered with the top-level
usage; a ``--cache`` that could not be made or used ended in a traceback (or a line that did not
name the path); ``epochfs mount`` served an empty view of a missing cache; ``epochfs index --out
x.txt`` wrote gzip; an http(s) index that could not be read named its URL twice and no cause.
"""

from __future__ import annotations

import contextlib
import gzip
import http.server
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from common import free_port, serving_http
from readonly_helpers import read_only_view
from sidecar_helpers import running_sidecar

from epochfs.fuse.mounting import find_mount, lazy_unmount
from epochfs.sidecar.store import INDEX_NAME, Policy, Store

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))
IS_ROOT = os.geteuid() == 0


def run(args: list[str], *, prefix: tuple[str, ...] = (), timeout: float = 60
        ) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}
    return subprocess.run([*prefix, EPOCHFS, *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def refusal(proc: subprocess.CompletedProcess[str]) -> str:
    """The one line of a refusal: exit 2, no traceback, nothing else on stderr."""
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out, out
    assert proc.returncode == 2, out
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got: {proc.stderr!r}"
    return lines[0]


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    (root / "train").mkdir(parents=True)
    for i in range(3):
        (root / "train" / f"{i}.bin").write_bytes(os.urandom(1024))
    return root


def make_cache(path: Path) -> Path:
    with Store(path, create=True) as store:
        store.configure(Policy(capacity=1 << 20))
    return path


# ---------------------------------------------------------------------------- 1. unknown flags
@pytest.mark.parametrize(
    ("command", "args"),
    [
        ("sample", []),
        ("sidecar", []),
        ("mount", []),
        ("publish", []),
        ("cut", []),
        ("relist", []),
        ("verify", []),
        ("status", ["--cache", "/nowhere"]),
        ("unmount", ["--mount", "/nowhere"]),
        ("index", ["file:///nowhere", "--out", "/nowhere/x.gz"]),
        ("bench", []),
        ("webhook", ["--profiles", "/nowhere", "--tls-cert", "/nowhere/c.pem",
                     "--tls-key", "/nowhere/k.pem"]),
    ],
)
def test_an_unknown_flag_is_refused_with_the_commands_own_usage(command: str, args: list[str]) -> None:
    proc = run([command, *args, "--bogus"])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith(f"usage: epochfs {command} "), proc.stderr
    assert proc.stderr.splitlines()[-1] == f"epochfs {command}: error: unrecognized arguments: --bogus"


def test_a_stray_argument_after_the_command_is_the_commands_error_and_before_it_the_top_levels(
) -> None:
    after = run(["cut", "--cache", "/nowhere", "stray"])
    assert after.returncode == 2
    assert after.stderr.splitlines()[-1] == "epochfs cut: error: unrecognized arguments: stray"
    before = run(["--bogus", "cut", "--cache", "/nowhere"])
    assert before.returncode == 2 and before.stderr.startswith("usage: epochfs [-h]"), before.stderr
    assert before.stderr.splitlines()[-1] == "epochfs: error: unrecognized arguments: --bogus"


# ---------------------------------------------------------------------------- 2. --cache
CREATES = ("sample", "sidecar")
"""The commands that make a missing cache; the others need one made already."""
CACHE_COMMANDS = ("sample", "sidecar", "mount", "publish", "cut", "relist", "verify", "status")


def cache_args(command: str, cache: Path, tmp_path: Path, dataset: Path) -> list[str]:
    extra = {
        "sample": ["--remote", dataset.as_uri()],
        "sidecar": ["--remote", dataset.as_uri(), "--mount", str(tmp_path / "view"),
                    "--health-port", str(free_port())],
        "mount": ["--mount", str(tmp_path / "view")],
        "publish": ["--mount", str(tmp_path / "view")],
    }.get(command, [])
    return [command, "--cache", str(cache), *extra]


@pytest.mark.parametrize("command", CACHE_COMMANDS)
def test_a_cache_under_proc_is_refused_naming_it(command: str, tmp_path: Path, dataset: Path) -> None:
    cache = Path(f"/proc/epochfs-test-{os.getpid()}")
    line = refusal(run(cache_args(command, cache, tmp_path, dataset)))
    assert line.startswith(f"epochfs {command}: --cache {cache}: "), line
    if command in CREATES:
        assert line.endswith("cannot create it in /proc: no such file or directory"), line
    else:
        assert "no epochfs cache there (the folder does not exist)" in line and "epochfs sample" in line
    assert not (tmp_path / "view").exists()  # refused before anything else was made


@pytest.mark.parametrize("command", CACHE_COMMANDS)
def test_a_cache_that_is_a_file_or_below_one_is_refused_naming_it(
    command: str, tmp_path: Path, dataset: Path
) -> None:
    afile = tmp_path / "afile"
    afile.write_text("not a folder")
    line = refusal(run(cache_args(command, afile, tmp_path, dataset)))
    assert line == f"epochfs {command}: --cache {afile}: exists and is not a directory"
    below = afile / "cache"
    line = refusal(run(cache_args(command, below, tmp_path, dataset)))
    assert line.startswith(f"epochfs {command}: --cache {below}: "), line
    if command in CREATES:
        assert line.endswith(f"cannot create it: {afile} is not a directory"), line
    else:
        assert "no epochfs cache there" in line, line


@pytest.mark.skipif(not IS_ROOT, reason="a read-only bind mount needs root")
@pytest.mark.parametrize("command", CACHE_COMMANDS)
def test_a_cache_on_a_read_only_file_system_is_refused_naming_it(
    command: str, tmp_path: Path, dataset: Path
) -> None:
    source = make_cache(tmp_path / "source" / "cache")
    with read_only_view(source.parent, tmp_path / "ro") as ro:
        cache = ro / "cache"
        line = refusal(run(cache_args(command, cache, tmp_path, dataset)))
        expected = f"epochfs {command}: --cache {cache}: cannot write in it: read-only file system"
        if command == "status":  # and where to look instead: the view's status.json
            assert line.startswith(expected + " (") and "epochfs status --mount" in line, line
        else:
            assert line == expected
        if command in CREATES:
            fresh = ro / "fresh"
            line = refusal(run(cache_args(command, fresh, tmp_path, dataset)))
            assert line == (f"epochfs {command}: --cache {fresh}: cannot create it in {ro}: "
                            f"read-only file system")


def without_root_privilege() -> tuple[str, ...]:
    """A prefix that runs a command without root's right to ignore file modes (none needed when
    the tests do not run as root)."""
    if not IS_ROOT:
        return ()
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("needs setpriv to drop root's file-mode override")
    return (setpriv, "--bounding-set", "-dac_override,-dac_read_search", "--")


@pytest.mark.parametrize("command", CACHE_COMMANDS)
def test_a_cache_where_permission_is_denied_is_refused_naming_it(
    command: str, tmp_path: Path, dataset: Path
) -> None:
    prefix = without_root_privilege()
    locked = tmp_path / "locked"
    make_cache(locked / "cache")
    locked.chmod(0o500)
    (locked / "cache").chmod(0o500)
    try:
        cache = locked / "cache"
        line = refusal(run(cache_args(command, cache, tmp_path, dataset), prefix=prefix))
        expected = f"epochfs {command}: --cache {cache}: cannot write in it: permission denied"
        if command == "status":  # and where to look instead: the view's status.json
            assert line.startswith(expected + " (") and "epochfs status --mount" in line, line
        else:
            assert line == expected
        if command in CREATES:
            fresh = locked / "fresh"
            line = refusal(run(cache_args(command, fresh, tmp_path, dataset), prefix=prefix))
            assert line == (f"epochfs {command}: --cache {fresh}: cannot create it in {locked}: "
                            f"permission denied")
    finally:
        (locked / "cache").chmod(0o700)
        locked.chmod(0o700)


# ---------------------------------------------------------------------------- 3. mount's cache
@contextlib.contextmanager
def nothing_left_mounted(*paths: Path) -> Iterator[None]:
    """Before the fix ``epochfs mount`` mounted an empty cache: never leave such a mount behind."""
    try:
        yield
    finally:
        for p in paths:
            if find_mount(p) is not None:
                lazy_unmount(p, any_kind=True)


def test_mount_refuses_a_cache_folder_that_does_not_exist(tmp_path: Path) -> None:
    cache, view = tmp_path / "cache", tmp_path / "view"
    with nothing_left_mounted(view, cache / "objects-ro"):
        line = refusal(run(["mount", "--cache", str(cache), "--mount", str(view)], timeout=30))
    assert line == (f"epochfs mount: --cache {cache}: no epochfs cache there (the folder does not "
                    f"exist); start `epochfs sample` or `epochfs sidecar` with this --cache first")
    assert not cache.exists() and not view.exists()  # nothing made, nothing mounted


def test_mount_refuses_a_folder_that_holds_no_epochfs_cache(tmp_path: Path) -> None:
    cache, view = tmp_path / "cache", tmp_path / "view"
    cache.mkdir()
    with nothing_left_mounted(view, cache / "objects-ro"):
        line = refusal(run(["mount", "--cache", str(cache), "--mount", str(view)], timeout=30))
    assert line == (f"epochfs mount: --cache {cache}: no epochfs cache there (no {INDEX_NAME}); "
                    f"start `epochfs sample` or `epochfs sidecar` with this --cache first")
    assert list(cache.iterdir()) == [] and not view.exists()


@pytest.mark.parametrize("view", ["fuse", "folder"])
def test_the_sidecar_serves_a_cache_it_makes(view: str, tmp_path: Path, dataset: Path) -> None:
    """The sidecar makes its cache (and index) before it starts its view's child, so the
    refusal of a missing cache never meets the sidecar's own ``epochfs mount`` or ``publish``."""
    if view == "fuse" and (not IS_ROOT or not os.path.exists("/dev/fuse")):
        pytest.skip("the FUSE view needs root and /dev/fuse")
    with running_sidecar(tmp_path, remote=dataset.as_uri(), endpoint="",
                         extra=("--view", view, "--kube-reporting", "0")) as car:
        assert car.health()["code"] == 200
        assert (car.cache / INDEX_NAME).exists()
    assert "no epochfs cache there" not in car.log_text()


# ---------------------------------------------------------------------------- 4. index --out
def test_index_order_sorted_writes_key_order(tmp_path: Path, dataset: Path) -> None:
    """``--order sorted`` keeps the key order (the default shuffles: docs/listing.md)."""
    out = tmp_path / "keys.jsonl"
    proc = run(["index", dataset.as_uri(), "--out", str(out), "--order", "sorted"])
    assert proc.returncode == 0, proc.stderr
    lines = out.read_bytes().splitlines()
    header = json.loads(lines[0])
    assert header["order"] == "sorted"
    keys = [json.loads(line)["k"] for line in lines[1:-1]]
    assert keys == sorted(keys) == ["train/0.bin", "train/1.bin", "train/2.bin"]
    bad = run(["index", dataset.as_uri(), "--out", str(out), "--order", "random"])
    assert bad.returncode == 2 and "invalid choice" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.parametrize("where", ["folder", "missing folder", "proc"])
def test_index_refuses_an_out_it_cannot_write_before_it_lists(
        tmp_path: Path, dataset: Path, where: str) -> None:
    """One line and exit 2 at once: it listed the whole remote first, then printed a traceback (and
    a missing folder was made)."""
    out = {"folder": tmp_path, "missing folder": tmp_path / "nowhere" / "x.gz",
           "proc": Path("/proc/epochfs-index.gz")}[where]
    proc = run(["index", dataset.as_uri(), "--out", str(out)])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(f"epochfs index: --out {out}: "), proc.stderr
    assert "indexing" not in proc.stderr  # refused before the listing
    assert not (tmp_path / "nowhere").exists()


def test_index_writes_plain_json_lines_for_a_name_without_gz(tmp_path: Path, dataset: Path) -> None:
    """The reader looks at the first bytes, not the name, so a plain file is an index too."""
    from epochfs.sidecar.listing.indexfile import IndexSource, is_index

    plain, packed = tmp_path / "keys.txt", tmp_path / "keys.jsonl.gz"
    for out in (plain, packed):
        proc = run(["index", dataset.as_uri(), "--out", str(out)])
        assert proc.returncode == 0 and proc.stdout.strip() == "3", proc.stderr
        assert "Traceback" not in proc.stderr
    assert packed.read_bytes()[:2] == b"\x1f\x8b"  # gzip, as before
    assert plain.read_bytes().startswith(b'{"epochfs_index"'), plain.read_bytes()[:20]
    # The same records (each index in its own shuffled order: a salt of its own).
    packed_lines = gzip.decompress(packed.read_bytes()).splitlines()
    assert sorted(packed_lines[1:]) == sorted(plain.read_bytes().splitlines()[1:])
    assert is_index(plain.as_uri())
    source = IndexSource(plain.as_uri())
    keys = [o.key for page in source.pages(source.spans()[0], "") for o in page.objects]
    assert sorted(keys) == ["train/0.bin", "train/1.bin", "train/2.bin"]


# ---------------------------------------------------------------------------- 5. an index URL
class _Answers(http.server.BaseHTTPRequestHandler):
    """Answers every request with the status its path starts with (``/404/index.txt``)."""

    def do_GET(self) -> None:
        self.send_response(int(self.path.strip("/").split("/")[0]))
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_HEAD = do_GET

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def answers() -> Iterator[str]:
    with serving_http(_Answers) as url:
        yield url


@pytest.mark.parametrize(("status", "reason"), [(404, "HTTP 404 Not Found"),
                                                (500, "HTTP 500 Internal Server Error")])
def test_an_index_url_that_answers_an_error_names_the_url_once_and_the_status(
    answers: str, status: int, reason: str
) -> None:
    from epochfs.sidecar.remote import RemoteError
    from epochfs.sidecar.remote.httpindex import HTTPRemote

    url = f"{answers}/{status}/index.txt"
    with pytest.raises(RemoteError) as raised:
        list(HTTPRemote(url=f"{answers}/data", index_url=url, read_timeout=5).list())
    assert str(raised.value) == f"cannot read the index {url}: {reason}"


def test_an_index_url_with_credentials_is_redacted_in_the_message() -> None:
    from epochfs.sidecar.remote import RemoteError
    from epochfs.sidecar.remote.httpindex import HTTPRemote

    port = free_port()  # nothing listens there
    url = f"http://user:secret@127.0.0.1:{port}/index.txt?sig=abc"
    with pytest.raises(RemoteError) as raised:
        list(HTTPRemote(url=f"http://127.0.0.1:{port}/data", index_url=url, read_timeout=5).list())
    assert str(raised.value) == (f"cannot read the index http://***:***@127.0.0.1:{port}/index.txt?sig=***: "
                                 f"connection refused")


@pytest.mark.parametrize("case", ["refused", "404"])
def test_the_sampler_names_an_index_url_it_cannot_read_once_with_the_cause(
    case: str, tmp_path: Path, answers: str
) -> None:
    if case == "refused":
        base, reason = f"http://127.0.0.1:{free_port()}", "connection refused"
        url = f"{base}/index.txt"
    else:
        base, reason = answers, "HTTP 404 Not Found"
        url = f"{base}/404/index.txt"
    # The index is read at the start (the remote's probe): refused there, not retried for ever.
    r = run(["sample", "--remote", f"{base}/data", "--index", url, "--cache", str(tmp_path / "c")])
    line = r.stderr.strip().splitlines()[-1]
    if case == "refused":
        assert r.returncode == 75, r.stderr[-2000:]
        assert line == ("epochfs sample: the remote cannot be reached now: "
                        f"cannot read the index {url}: {reason}"), line
    else:
        assert r.returncode == 2, r.stderr[-2000:]
        assert line == f"epochfs sample: --index: cannot read the index {url}: {reason}; check --index", line
    assert line.count(url) == 1, line
    assert "Traceback" not in r.stderr


# ---------------------------------------------------------------------------- 6. the folder view's --mount
VIEW_COMMANDS = ("publish", "sidecar")
"""``epochfs publish`` and ``epochfs sidecar --view folder``: before the fix a folder the publisher
could not make ended ``publish`` in a traceback, and the sidecar restarted its publisher for ever."""


def view_args(command: str, view: Path, tmp_path: Path, dataset: Path) -> list[str]:
    cache = make_cache(tmp_path / "cache") if command == "publish" else tmp_path / "cache"
    extra = {"sidecar": ["--view", "folder", "--remote", dataset.as_uri(), "--health-port", str(free_port()),
                         "--kube-reporting", "0", "--termination-log", str(tmp_path / "termination-log")]
             }.get(command, [])
    return [command, "--cache", str(cache), "--mount", str(view), *extra]


def view_refusal(command: str, view: Path, tmp_path: Path, dataset: Path,
                 prefix: tuple[str, ...] = ()) -> str:
    """The refusal's line without its ``epochfs COMMAND: `` (the sidecar's also in its termination
    message, where that file exists)."""
    termination = tmp_path / "termination-log"
    termination.write_text("")
    line = refusal(run(view_args(command, view, tmp_path, dataset), prefix=prefix, timeout=30))
    assert line.startswith(f"epochfs {command}: --mount {view}: "), line
    if command == "sidecar":
        assert termination.read_text() == line + "\n"
    return line[len(f"epochfs {command}: "):]


@pytest.mark.parametrize("command", VIEW_COMMANDS)
def test_a_view_folder_under_proc_is_refused_naming_it(command: str, tmp_path: Path, dataset: Path) -> None:
    view = Path(f"/proc/epochfs-view-{os.getpid()}")
    assert view_refusal(command, view, tmp_path, dataset) == (
        f"--mount {view}: cannot create it in /proc: no such file or directory")


@pytest.mark.parametrize("command", VIEW_COMMANDS)
def test_a_view_folder_that_is_a_file_below_one_or_without_a_parent_is_refused_naming_it(
    command: str, tmp_path: Path, dataset: Path
) -> None:
    afile = tmp_path / "afile"
    afile.write_text("not a folder")
    line = view_refusal(command, afile, tmp_path, dataset)
    assert line == f"--mount {afile}: exists and is not a folder"
    below = afile / "view"
    assert view_refusal(command, below, tmp_path, dataset) == (
        f"--mount {below}: cannot create it: {afile} is not a folder")
    orphan = tmp_path / "nowhere" / "view"
    assert view_refusal(command, orphan, tmp_path, dataset) == (
        f"--mount {orphan}: cannot create it: its parent {orphan.parent} does not exist")
    assert not orphan.parent.exists()  # the FUSE view's rule: the parent is never made


@pytest.mark.skipif(not IS_ROOT, reason="a read-only bind mount needs root")
@pytest.mark.parametrize("command", VIEW_COMMANDS)
def test_a_view_folder_on_a_read_only_file_system_is_refused_naming_it(
    command: str, tmp_path: Path, dataset: Path
) -> None:
    (tmp_path / "source" / "view").mkdir(parents=True)
    with read_only_view(tmp_path / "source", tmp_path / "ro") as ro:
        assert view_refusal(command, ro / "view", tmp_path, dataset) == (
            f"--mount {ro / 'view'}: cannot write in it: read-only file system")
        assert view_refusal(command, ro / "fresh", tmp_path, dataset) == (
            f"--mount {ro / 'fresh'}: cannot create it in {ro}: read-only file system")


@pytest.mark.parametrize("command", VIEW_COMMANDS)
def test_a_view_folder_where_permission_is_denied_is_refused_naming_it(
    command: str, tmp_path: Path, dataset: Path
) -> None:
    prefix = without_root_privilege()
    if command == "sidecar":
        make_cache(tmp_path / "cache")  # made by root: the unprivileged sidecar only opens it
    locked = tmp_path / "locked"
    (locked / "view").mkdir(parents=True)
    locked.chmod(0o500)
    (locked / "view").chmod(0o500)
    try:
        assert view_refusal(command, locked / "view", tmp_path, dataset, prefix) == (
            f"--mount {locked / 'view'}: cannot write in it: permission denied")
        assert view_refusal(command, locked / "fresh", tmp_path, dataset, prefix) == (
            f"--mount {locked / 'fresh'}: cannot create it in {locked}: permission denied")
    finally:
        (locked / "view").chmod(0o700)
        locked.chmod(0o700)


def test_the_sidecar_makes_a_missing_view_folder_before_its_publisher_starts(
    tmp_path: Path, dataset: Path
) -> None:
    """A missing folder whose parent is a folder passes the checks: made by the start check, as a
    FUSE mount point is (the checks above must not refuse what a pod's fresh volume holds)."""
    view = tmp_path / "view"
    with running_sidecar(tmp_path, remote=dataset.as_uri(), endpoint="", mount=view,
                         extra=("--view", "folder", "--kube-reporting", "0")) as car:
        assert car.health()["code"] == 200
        assert (view / ".epochfs" / "status.json").is_file()
    assert "Traceback" not in car.log_text()
