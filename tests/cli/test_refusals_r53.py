"""Refusals that came too late or not at all (review round 53, D53a), through the real command line.

* ``epochfs publish --mount`` inside the cache folder was accepted (the sidecar's folder view and
  ``epochfs mount`` refused it); the publisher wrote its folders into the store's ``tmp/``, and
  every later sampler start crashed in the store's recovery (IsADirectoryError): a folder left in
  ``tmp/`` must never stop a start either.
* ``epochfs index --out`` inside a ``file://`` remote's folder was accepted: the index listed itself
  as a sample. An unknown scheme (``s4://``) was found after the whole listing (exit 1), an
  upper-case ``FILE://`` failed there too, ``file://localhost/p`` was read as the relative folder
  ``localhost/p`` and an empty ``--out`` was called "a folder".
* ``epochfs sidecar --view folder`` with a relative ``--link-root`` started its publisher, which
  refused it at every restart, for ever; the FUSE view refused it at once.
* ``epochfs sidecar`` (FUSE view) with a ``--mount`` that holds the cache folder was refused only
  after the cache was made inside it, so the corrected command found ``--mount`` "not empty".

Real processes (the console script) over small ``file://`` datasets; the store's recovery runs on
a real cache folder.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from common import free_port

from epochfs.sidecar.store import Store

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))
GUARD = 120.0
"""Seconds after which a command that should have refused at once is killed, so that a missing
refusal fails the test instead of hanging it (the refusals take well under a second)."""
A_CHILD = r"started (sampler|publisher|fuse) \(pid"
"""The supervisor's line when it starts a child: a setting refused at the start starts none."""


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}


def _run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``epochfs ARGS`` to its end; one that runs on (a refusal missing) is killed by the guard."""
    try:
        return subprocess.run([EPOCHFS, *args], capture_output=True, text=True, timeout=GUARD,
                              env=_env(), cwd=cwd, check=False)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"epochfs {' '.join(args)} ran on instead of refusing: {e.stderr!r}")


def _run_until(argv: list[str], bad: str) -> tuple[int, str, bool]:
    """Run ``epochfs ARGV`` until it exits or a line matches ``bad`` (then it is stopped); its
    status, its output and whether ``bad`` was seen."""
    proc = subprocess.Popen([EPOCHFS, *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=_env())
    guard = threading.Timer(GUARD, proc.kill)
    guard.start()
    lines: list[str] = []
    seen = False
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if re.search(bad, line):
                seen = True
                proc.terminate()
                break
        proc.communicate(timeout=GUARD)
    finally:
        guard.cancel()
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    return proc.returncode, "".join(lines), seen


def _dataset(tmp_path: Path) -> Path:
    remote = tmp_path / "data"
    (remote / "train").mkdir(parents=True)
    for i in range(3):
        (remote / "train" / f"{i}.bin").write_bytes(bytes([i]) * 100)
    return remote


def _last(text: str) -> str:
    return text.strip().splitlines()[-1] if text.strip() else ""


# ------------------------------------------------------------------ 1. publish inside the cache
@pytest.mark.parametrize("where", ["tmp", "tmp/view", "published"])
def test_publish_refuses_a_mount_inside_the_cache(tmp_path: Path, where: str) -> None:
    cache = tmp_path / "cache"
    Store(cache, create=True).close()
    before = sorted(os.listdir(cache / "tmp"))
    inside = cache / where
    code, out, published = _run_until(["--log-level", "INFO", "publish", "--cache", str(cache),
                                       "--mount", str(inside)], r"publishing .* into ")
    assert not published and code == 2, out
    assert _last(out) == (f"epochfs publish: --mount: {inside} is inside the cache folder {cache} "
                                 f"(--cache), which the store writes: mount the view beside the cache "
                                 f"(--mount {tmp_path / 'view'})"), out
    assert sorted(os.listdir(cache / "tmp")) == before and not (cache / "published").exists()


def test_publish_refuses_the_cache_folder_itself(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    Store(cache, create=True).close()
    out = _run("publish", "--cache", str(cache), "--mount", str(cache))
    assert out.returncode == 2 and f"--mount: {cache} is the cache folder (--cache)" in out.stderr, out.stderr


def test_a_folder_left_in_tmp_does_not_stop_recovery(tmp_path: Path) -> None:
    """What the accepted ``publish --mount CACHE/tmp`` left: epoch folders, the view's control
    folder, a ``latest`` link, beside a partial download. Recovery (every sampler start) removes
    them all; it raised IsADirectoryError at every start."""
    cache = tmp_path / "cache"
    Store(cache, create=True).close()
    tmp = cache / "tmp"
    (tmp / "epoch-0" / "train").mkdir(parents=True)
    (tmp / "epoch-0" / "train" / "0.bin").symlink_to(cache / "objects" / "ab" / "x")
    (tmp / ".epochfs").mkdir()
    (tmp / "latest").symlink_to("epoch-0")
    (tmp / "partial.part").write_bytes(b"x")
    outside = tmp_path / "keep"
    outside.mkdir()
    (outside / "f").write_text("kept")
    (tmp / "to-outside").symlink_to(outside, target_is_directory=True)
    with Store(cache) as store:
        report = store.recover()
    assert os.listdir(tmp) == [], os.listdir(tmp)
    assert report.temp_removed >= 5
    assert (outside / "f").read_text() == "kept"  # a link is removed, never followed


# ------------------------------------------------------------------ 2. index --out in the remote
@pytest.mark.parametrize("name", ["index.jsonl", "train/index.jsonl.gz"])
def test_index_out_inside_the_remote_folder_is_refused(tmp_path: Path, name: str) -> None:
    remote = _dataset(tmp_path)
    out_path = remote / name
    out = _run("--log-level", "INFO", "index", f"file://{remote}", "--out", str(out_path))
    assert out.returncode == 2, out.stderr
    assert (f"epochfs index: --out: {out_path} is inside the remote's folder {remote} "
            f"(REMOTE file://{remote}), whose files are the samples") in out.stderr, out.stderr
    assert "indexing" not in out.stderr  # refused before the listing
    assert not out_path.exists()


def test_index_out_beside_the_remote_folder_is_written(tmp_path: Path) -> None:
    remote = _dataset(tmp_path)
    out = _run("index", f"file://{remote}", "--out", str(tmp_path / "data-index.jsonl"))
    assert out.returncode == 0 and out.stdout.strip() == "3", out.stderr


# ------------------------------------------------------------------ 3. index --out's scheme
@pytest.mark.parametrize("url", ["s4://bucket/idx.jsonl.gz", "nosuchproto://x/idx.jsonl"])
def test_index_out_with_an_unknown_scheme_is_refused_before_the_listing(tmp_path: Path, url: str) -> None:
    remote = _dataset(tmp_path)
    out = _run("--log-level", "INFO", "index", f"file://{remote}", "--out", url)
    scheme = url.partition("://")[0]
    assert out.returncode == 2, out.stderr
    assert _last(out.stderr).startswith(f"epochfs index: --out: unknown URL scheme {scheme!r}"), out.stderr
    assert "indexing" not in out.stderr


@pytest.mark.parametrize("spelling", ["FILE://", "File://", "file://localhost", "FILE://localhost"])
def test_index_out_file_url_spellings_name_the_absolute_path(tmp_path: Path, spelling: str) -> None:
    """``FILE:///p`` is ``file:///p`` (a scheme's case is no part of it), ``file://localhost/p``
    is ``/p`` (as the remote's ``file://localhost/`` is): both are written there, nothing is
    made in the working folder."""
    remote = _dataset(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    target = tmp_path / "out" / "idx.jsonl"
    target.parent.mkdir()
    out = _run("index", f"file://{remote}", "--out", f"{spelling}{target}", cwd=work)
    assert out.returncode == 0 and out.stdout.strip() == "3", out.stderr
    assert target.read_text().count('"k"') == 3
    assert os.listdir(work) == []


@pytest.mark.parametrize("empty", ["", "  "])
def test_index_empty_out_is_refused_as_empty(tmp_path: Path, empty: str) -> None:
    remote = _dataset(tmp_path)
    out = _run("index", f"file://{remote}", "--out", empty, cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert _last(out.stderr).startswith("epochfs index: --out: must not be empty"), out.stderr


# ------------------------------------------------------------------ 4. relative --link-root
@pytest.mark.parametrize("view", ["folder", "fuse"])
def test_sidecar_refuses_a_relative_link_root_at_its_start(tmp_path: Path, view: str) -> None:
    """Both views: exit 2 with the reason, in the termination log too, and no child started
    (the folder view's publisher refused it at every restart, for ever)."""
    if view == "fuse" and (os.geteuid() != 0 or not os.path.exists("/dev/fuse")):
        pytest.skip("the FUSE view needs root and /dev/fuse")
    remote = _dataset(tmp_path)
    term = tmp_path / "termination-log"
    term.write_text("")
    code, out, started = _run_until(
        ["--log-level", "INFO", "sidecar", "--view", view, "--remote", f"file://{remote}",
         "--cache", str(tmp_path / "cache"), "--mount", str(tmp_path / "view"), "--capacity", "1Mi",
         "--health-port", str(free_port()), "--kube-reporting", "0", "--link-root", "rel/objs",
         "--termination-log", str(term)], A_CHILD)
    assert not started, out[-3000:]
    said = "epochfs sidecar: --link-root: rel/objs must be an absolute path"
    assert code == 2 and _last(out) == said, out[-3000:]
    assert term.read_text().strip() == said


# ------------------------------------------------------------------ 5. FUSE --mount holds the cache
def test_fuse_sidecar_refuses_a_mount_holding_the_cache_before_making_it(tmp_path: Path) -> None:
    """Refused before the cache is made in ``--mount`` (it was made, then the supervisor refused,
    and the corrected command found ``--mount`` not empty); the reason is in the termination log."""
    remote = _dataset(tmp_path)
    mount = tmp_path / "view"
    mount.mkdir()
    term = tmp_path / "termination-log"
    term.write_text("")
    out = _run("sidecar", "--remote", f"file://{remote}", "--cache", str(mount / "cache"),
               "--mount", str(mount), "--capacity", "1Mi", "--health-port", str(free_port()),
               "--kube-reporting", "0", "--termination-log", str(term))
    said = f"epochfs sidecar: --mount: {mount} holds the cache folder {mount}/cache (--cache)"
    assert out.returncode == 2 and _last(out.stderr).startswith(said), out.stderr
    assert term.read_text().startswith(said)
    assert os.listdir(mount) == []


def test_fuse_sidecar_refuses_a_mount_inside_the_objects_before_making_the_cache(tmp_path: Path) -> None:
    """A --mount under the (new) cache's objects folder: the FUSE view's own reason ("where the
    epochs' files point"), given before the cache is made."""
    remote = _dataset(tmp_path)
    cache = tmp_path / "cache"
    inside = cache / "objects" / "view"
    out = _run("sidecar", "--remote", f"file://{remote}", "--cache", str(cache), "--mount", str(inside),
               "--capacity", "1Mi", "--health-port", str(free_port()), "--kube-reporting", "0",
               "--termination-log", str(tmp_path / "termination-log"))
    assert out.returncode == 2, out.stderr
    assert f"--mount: {inside} is inside {cache / 'objects'}, where the epochs' files point" in out.stderr
    assert not cache.exists()


# ------------------------------------------------------------------ a remote's root through a link
def test_index_out_inside_a_remote_reached_through_a_link_is_refused(tmp_path: Path) -> None:
    """A dataset root that is a link (``current -> v3``): --out inside the folder it names is
    inside the remote all the same (review R53b: it was written, and listed itself as a sample)."""
    remote = _dataset(tmp_path)
    link = tmp_path / "current"
    link.symlink_to(remote, target_is_directory=True)
    out = _run("index", f"file://{link}", "--out", str(remote / "x.jsonl"))
    assert out.returncode == 2, out.stderr
    assert f"is inside the remote's folder {remote} " in out.stderr, out.stderr
    assert not (remote / "x.jsonl").exists()


def test_a_cache_inside_a_remote_reached_through_a_link_is_refused(tmp_path: Path) -> None:
    remote = _dataset(tmp_path)
    link = tmp_path / "current"
    link.symlink_to(remote, target_is_directory=True)
    out = _run("sample", "--remote", f"file://{link}", "--cache", str(remote / "cache"))
    assert out.returncode == 2, out.stderr
    assert f"--cache: {remote / 'cache'} is inside the remote's folder {remote} " in out.stderr, out.stderr
    assert not (remote / "cache").exists()


def test_a_remote_of_the_whole_filesystem_suggests_no_place_inside_it(tmp_path: Path) -> None:
    """Every path is inside ``file:///``: the refusal's advice was a path inside it again."""
    out = _run("index", "file:///", "--out", str(tmp_path / "root.jsonl"))
    assert out.returncode == 2, out.stderr
    assert "narrower folder than the whole filesystem" in out.stderr, out.stderr
    assert "--out /" not in out.stderr, out.stderr
