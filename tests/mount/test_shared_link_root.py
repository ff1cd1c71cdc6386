"""Two views of one cache share its read-only bind (``objects-ro``), which the epochs' symlinks point
into: the server that stops last removes it, whichever made it.

Before, the server that made the bind removed it when it stopped and a server that reused it never did:
stopping the first of two ``epochfs mount`` over one cache (or a second ``epochfs sidecar`` refused by
the sampler's lock) took the bind from under the other view, whose every read then failed with ENOENT;
and a server restarted after a kill -9 left the bind mounted when it stopped."""

from __future__ import annotations

import hashlib
import signal
import subprocess
from pathlib import Path

from fuse_helpers import EPOCHFS, admit, freeze, make_objects, mounted, open_store

from epochfs.fuse.mounting import find_mount, lazy_unmount, wait_for_mount


def _serve(cache: Path, mount: Path, *more: str) -> subprocess.Popen[bytes]:
    mount.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([*EPOCHFS, "mount", "--cache", str(cache), "--mount", str(mount), *more],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for_mount(mount, timeout=20, alive=lambda: proc.poll() is None), proc.poll()
    except BaseException:
        _end(proc, mount, signal.SIGKILL)
        raise
    return proc


def _end(proc: subprocess.Popen[bytes], mount: Path, sig: int = signal.SIGTERM) -> int:
    proc.send_signal(sig)
    code = proc.wait(timeout=30)
    if find_mount(mount) is not None:
        lazy_unmount(mount)
    return code


def _digests(root: Path) -> dict[str, str]:
    files = sorted((root / "epoch-0/train").iterdir())
    return {p.name: hashlib.md5(p.read_bytes()).hexdigest() for p in files}


def _cache_with_epoch_0(cache: Path, count: int) -> dict[str, str]:
    """A cache of ``count`` objects in epoch 0; the md5 of each file by name."""
    objects = make_objects(count, 64)
    with open_store(cache) as store:
        admit(store, objects)
        assert store.cut(0) == 0
    return {k.rsplit("/", 1)[1]: hashlib.md5(v).hexdigest() for k, v in objects.items()}


def test_the_last_view_of_a_cache_to_stop_removes_the_bind_and_none_before_it(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    want = _cache_with_epoch_0(cache, 6)
    bind = cache / "objects-ro"
    first = _serve(cache, tmp_path / "first")  # makes the bind
    with mounted(cache, tmp_path / "a") as a:  # reuses it
        assert _digests(tmp_path / "first") == want
        assert _end(first, tmp_path / "first") == 0
        assert find_mount(bind) is not None, "the first view took the bind from under the second"
        assert _digests(a.path) == want
        # A server killed leaves the bind; one started after it reuses it, and when it stops the
        # first view still reads through it.
        third = _serve(cache, tmp_path / "c")
        _end(third, tmp_path / "c", signal.SIGKILL)
        assert _digests(a.path) == want
        a.proc.send_signal(signal.SIGTERM)
        assert a.proc.wait(timeout=30) == 0
        assert find_mount(bind) is None, "the last view to stop left the bind mounted"
    # Killed, then a restart that is the only view: it removes the bind it did not make.
    killed = _serve(cache, tmp_path / "d")
    _end(killed, tmp_path / "d", signal.SIGKILL)
    assert find_mount(bind) is not None
    again = _serve(cache, tmp_path / "d")
    assert _digests(tmp_path / "d") == want
    assert _end(again, tmp_path / "d") == 0
    assert find_mount(bind) is None, "a restarted view left the bind the killed one made"


def test_a_cache_spelled_through_a_symlink_or_read_through_its_own_link_root_is_one_cache(
        tmp_path: Path) -> None:
    """Two spellings of one cache (a symlink) share its bind: the view through the real path, stopped
    first, leaves it to the other. A view with a --link-root of its own reads no bind but counts as
    a view of the cache: the last of them to stop removes the bind, which none left behind."""
    cache = tmp_path / "real" / "cache"
    want = _cache_with_epoch_0(cache, 4)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    bind = cache / "objects-ro"
    real = _serve(cache, tmp_path / "a")
    linked = _serve(tmp_path / "link" / "cache", tmp_path / "b")
    try:
        assert _end(real, tmp_path / "a") == 0
        assert find_mount(bind) is not None and _digests(tmp_path / "b") == want
    finally:
        assert _end(linked, tmp_path / "b") == 0
    assert find_mount(bind) is None
    default = _serve(cache, tmp_path / "a")
    own = _serve(cache, tmp_path / "c", "--link-root", str(cache / "objects"))
    try:
        assert _end(default, tmp_path / "a") == 0
        assert _digests(tmp_path / "c") == want
    finally:
        assert _end(own, tmp_path / "c") == 0
    assert find_mount(bind) is None, "the bind was left mounted after the last view stopped"


def test_a_view_slow_to_answer_keeps_the_bind(tmp_path: Path) -> None:
    """A view that does not answer for a while (stopped here: SIGSTOP) is still a view: the other,
    stopping, leaves the bind to it (before: its liveness probe took it for dead after 5 s and the
    bind went from under its readers)."""
    cache = tmp_path / "cache"
    want = _cache_with_epoch_0(cache, 3)
    first, slow = _serve(cache, tmp_path / "a"), _serve(cache, tmp_path / "b")
    try:
        freeze(slow)
        try:
            assert _end(first, tmp_path / "a") == 0
        finally:
            slow.send_signal(signal.SIGCONT)
        assert find_mount(cache / "objects-ro") is not None and _digests(tmp_path / "b") == want
    finally:
        assert _end(slow, tmp_path / "b") == 0
    assert find_mount(cache / "objects-ro") is None
