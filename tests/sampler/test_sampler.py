"""``epochfs sample`` against the moto S3 server and file:// folders, through the real command."""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import time
from pathlib import Path

from common import S3Server, put_objects, random_objects, wait_until
from sampler_helpers import (
    disk_bytes,
    index_rows,
    running_sampler,
    s3_env,
    start_sampler,
    verify_cache,
)
from store_helpers import catalog_count, sampling_order

from epochfs.sidecar import keyorder
from epochfs.sidecar.store import Store


def s3_args(s3: S3Server) -> list[str]:
    return ["--endpoint-url", s3.endpoint]


def fetched(sp, n: int):
    return lambda: sp.stats()["samples"] >= n and sp.stats()["inflight_bytes"] == 0


def test_s3_every_byte_verified(s3: S3Server, tmp_path: Path) -> None:
    rng = random.Random(1)
    objects = random_objects(60, 20_000, prefix="train/")
    objects |= {f"val/{i}.bin": rng.randbytes(rng.randrange(0, 3_000_000)) for i in range(4)}
    objects["val/empty.bin"] = b""
    objects["deep/é/名前.npz"] = b"unicode key"
    put_objects(s3, "bkt", {f"ds/{k}": v for k, v in objects.items()})
    s3.client().put_object(Bucket="bkt", Key="other/not-mine.bin", Body=b"outside the prefix")
    cache = tmp_path / "cache"
    with running_sampler(cache, "s3://bkt/ds", *s3_args(s3), "--capacity", "1Gi",
                         "--concurrency", "8", env=s3_env(s3.endpoint)) as sp:
        wait_until(fetched(sp, len(objects)), what="every object fetched")
    assert verify_cache(cache, objects) == len(objects)
    stats = Store(cache).stats()
    assert stats.fetched_total == len(objects)
    assert stats.fetched_bytes_total == sum(map(len, objects.values()))
    assert stats.skipped_total == 0
    with Store(cache) as store:
        versions = dict(index_rows(cache, "SELECT key, version FROM samples"))
        assert versions["train/00000.bin"] == hashlib.md5(objects["train/00000.bin"]).hexdigest()
        assert catalog_count(store) == len(objects)


def test_file_remote_every_byte_and_unsafe_names(tmp_path: Path) -> None:
    root = tmp_path / "data"
    objects = random_objects(30, 5000, prefix="train/")
    for key, body in objects.items():
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(body)
    bad = os.fsencode(root) + b"/train/bad\xffname.bin"
    with open(bad, "wb") as f:
        f.write(b"x")
    (root / "train" / "tab\tname.bin").write_bytes(b"y")
    (root / "linkdir").symlink_to(root / "train")  # a folder symlink is not followed
    cache = tmp_path / "cache"
    with running_sampler(cache, root.as_uri(), "--capacity", "10Mi") as sp:
        wait_until(fetched(sp, len(objects)), what="every file fetched")
        assert "skipping key 'train/bad\\\\xffname.bin': not UTF-8" in sp.log_text()
    assert verify_cache(cache, objects) == len(objects)
    assert Store(cache).stats().skipped_total == 2


def test_hostile_s3_keys_are_skipped_and_never_escape(s3: S3Server, tmp_path: Path) -> None:
    good = random_objects(10, 1000, prefix="ok/")
    hostile = ["../escape.bin", "a/../../x", "./dot", "/abs", "a//b", "back\\slash", "ctl\x01char",
               "tab\tkey", "x" * 256, "d/" * 300 + "deep.bin", "clash", "clash/inner.bin"]
    put_objects(s3, "bkt", {f"ds/{k}": v for k, v in good.items()}
                | {f"ds/{k}": b"evil" for k in hostile} | {"ds/folder/": b""})
    cache = tmp_path / "sub" / "cache"
    with running_sampler(cache, "s3://bkt/ds", *s3_args(s3), env=s3_env(s3.endpoint)) as sp:
        wait_until(fetched(sp, len(good) + 1), what="good keys fetched")
        log = sp.log_text()
    fetched_keys = {str(r[0]) for r in index_rows(cache, "SELECT key FROM samples")}
    # 'clash' is a file and a folder (clash/inner.bin): the file is skipped, the folder's key kept.
    assert fetched_keys == set(good) | {"clash/inner.bin"}
    assert Store(cache).stats().skipped_total == len(hostile) - 1
    for reason in ("'..' component", "'.' component", "leading /", "empty component (//)",
                   "backslash", "control character", "component over 255 bytes", "path over 128 components",
                   "also a folder of other keys"):
        assert reason in log, reason
    outside = [p for p in tmp_path.rglob("*") if p.is_file() and not str(p).startswith(str(cache))
               and not p.name.endswith(".log")]
    assert outside == []
    verify_cache(cache)


def test_capacity_never_exceeded_while_sampling(s3: S3Server, tmp_path: Path) -> None:
    """The cache on disk, and its total with the bytes in flight, stay within --capacity at every
    look while a full cache turns over (sixteen downloads at once, an epoch cut every 0.3 s).

    Why these counts: 60 objects (about 3.6 MB) are 2.4 times the capacity, and a pass over them
    fetches again what was evicted, so the dataset never runs dry; 20 evictions (about 1.3 MB, most
    of the capacity) take some 5 s of turnover, which the cut interval and the 1 s retire grace
    pace, watched thousands of times."""
    rng = random.Random(2)
    objects = {f"train/{i:04d}.bin": rng.randbytes(rng.randrange(10_000, 120_000)) for i in range(60)}
    put_objects(s3, "bkt", objects)
    capacity = 1_500_000
    cache = tmp_path / "cache"
    observations = 0
    with running_sampler(cache, "s3://bkt", *s3_args(s3), "--capacity", str(capacity),
                         "--cut-interval", "0.3", "--keep-epochs", "1", "--concurrency", "16",
                         "--retire-grace", "1", env=s3_env(s3.endpoint)) as sp:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            on_disk = disk_bytes(cache)
            stats = sp.stats()
            assert on_disk <= capacity, f"{on_disk} bytes on disk > capacity {capacity}"
            assert int(stats["cache_bytes"]) + int(stats["inflight_bytes"]) <= capacity
            observations += 1
            if int(stats["evicted_total"]) >= 20 and observations >= 50:
                break
        else:
            raise AssertionError(f"no eviction pressure seen: {sp.stats()}")
    assert observations >= 50
    verify_cache(cache, objects)


def test_eviction_order_and_pinned_epochs(s3: S3Server, tmp_path: Path) -> None:
    """Fill, cut, and watch what goes: the samples admitted first, never a pinned epoch's."""
    size = 10_000
    objects = random_objects(40, size)
    put_objects(s3, "bkt", objects)
    cache = tmp_path / "cache"
    # A progress line every 0.2 s (the loop's poll): step 3 counts them as rounds of the loop.
    with running_sampler(cache, "s3://bkt", *s3_args(s3), "--capacity", str(10 * size),
                         "--headroom", "0.5", "--keep-epochs", "1", "--concurrency", "4",
                         "--progress-seconds", "0.2", env=s3_env(s3.endpoint)) as sp:
        def settled(n: int):
            def check() -> bool:
                s = sp.stats()
                return bool(s["backpressure"]) and s["samples"] == n and s["inflight_bytes"] == 0

            return check

        # 1. Ten fit; no epoch yet, so nothing may be evicted: backpressure.
        wait_until(settled(10), what="cache full and backpressure")
        ids = {str(k): int(i) for k, i in index_rows(cache, "SELECT key, id FROM samples")}
        by_age = sorted(ids, key=ids.__getitem__)
        order = sampling_order(0, list(objects))
        assert set(ids) == set(order[:10]), "the first ten keys of the sampling order"
        assert sp.stats()["evicted_total"] == 0

        # 2. Epoch 0 holds the newest half (budget 50%); the five admitted first are evicted.
        with Store(cache) as store:
            assert store.cut(0) == 0
            epoch0 = {f.path for f in store.epoch_files(0)}
        assert epoch0 == set(by_age[5:])
        wait_until(lambda: sp.stats()["evicted_total"] == 5 and sp.stats()["backpressure"]
                   and sp.stats()["samples"] == 10, what="five evicted, five new")
        now_keys = {str(r[0]) for r in index_rows(cache, "SELECT key FROM samples")}
        assert now_keys == epoch0 | set(order[10:15])

        # 3. A reader is on epoch 0 (the FUSE view records it); epoch 1 is cut: both pinned.
        with Store(cache) as store:
            store.record_read(0)
            assert store.cut(1) == 1
            epoch1 = {f.path for f in store.epoch_files(1)}
            assert epoch1 == set(order[10:15])
        # Nothing to wait for: the state must hold while the sampler keeps trying (each progress
        # line it writes in backpressure is one more round of failed reservations: the loop writes
        # at most one a round, after its reservation attempt).
        def rounds() -> int:
            return sp.log_text().count(" backpressure: ")

        seen = rounds()
        wait_until(lambda: rounds() >= seen + 2, what="two more sampler rounds in backpressure")
        s = sp.stats()
        assert s["evicted_total"] == 5 and s["samples"] == 10 and s["backpressure"], s
        with Store(cache) as store:
            for f in store.epoch_files(0):
                data = (store.objects_dir / f.object_name).read_bytes()
                assert data == objects[f.path]

            # 4. Once epoch 0 is no longer in use it retires and its samples become evictable.
            assert store.retire(now=time.time() + 3600) == [0]
        wait_until(lambda: sp.stats()["evicted_total"] == 10 and sp.stats()["samples"] == 10,
                   what="epoch 0 evicted")
        remaining = {str(r[0]) for r in index_rows(cache, "SELECT key FROM samples")}
        assert epoch1 <= remaining and not (epoch0 & remaining)
    verify_cache(cache, objects)


def test_schedule_mode_epochs_are_reproducible(s3: S3Server, tmp_path: Path) -> None:
    """Same seed, same catalog: the same windows on a node fetching one object at a time and on one
    fetching sixteen, running at once as two nodes do. Epoch 1's window adds 20 keys, more than
    sixteen in flight, so the second node's downloads finish out of order; 40 objects leave keys
    past the last window (30). Each epoch costs the sampler's wait on a catalog found empty (about
    1 s): two epochs, not more."""
    objects = random_objects(40, 3000)
    put_objects(s3, "bkt", objects)
    order = sampling_order(7, list(objects))
    caches = [tmp_path / "a", tmp_path / "b"]
    with contextlib.ExitStack() as nodes:
        stores = []
        for cache, concurrency in zip(caches, ("1", "16"), strict=True):
            nodes.enter_context(running_sampler(cache, "s3://bkt", *s3_args(s3), "--seed", "7", "--schedule",
                                                "initial=10,growth=3", "--concurrency", concurrency,
                                                env=s3_env(s3.endpoint)))
            stores.append(nodes.enter_context(Store(cache)))
        for n in range(2):
            for store in stores:
                wait_until(lambda n=n, store=store: store.cut(n) is not None, what=f"epoch {n} cut")
        lists = [{n: [f.path for f in store.epoch_files(n)] for n in range(2)} for store in stores]
    for cache in caches:
        verify_cache(cache, objects)
    assert lists[0] == lists[1], "same seed, same catalog: same epochs on every node"
    for n, size in ((0, 10), (1, 30)):
        assert sorted(lists[0][n]) == sorted(order[:size])


def test_shards_split_the_dataset(s3: S3Server, tmp_path: Path) -> None:
    """Two nodes' samplers, running at once as two nodes do: each caches its shard's keys and no
    other, and the two shards are the dataset."""
    objects = random_objects(20, 1000)
    put_objects(s3, "bkt", objects)
    expected = [{k for k in objects if keyorder.shard_of(k, 2) == i} for i in range(2)]
    assert all(expected), "each shard holds keys"
    with contextlib.ExitStack() as nodes:
        samplers = [nodes.enter_context(running_sampler(
            tmp_path / f"shard{i}", "s3://bkt", *s3_args(s3), "--shard-index", str(i), "--shard-count", "2",
            env=s3_env(s3.endpoint))) for i in range(2)]
        for i, sp in enumerate(samplers):
            wait_until(fetched(sp, len(expected[i])), what=f"shard {i}")
    got = [{str(r[0]) for r in index_rows(sp.cache, "SELECT key FROM samples")} for sp in samplers]
    assert got == expected
    assert not (got[0] & got[1]) and (got[0] | got[1]) == set(objects)


def test_cut_requests_are_served_and_sigterm_is_clean(s3: S3Server, tmp_path: Path) -> None:
    objects = random_objects(30, 2_000_000)
    put_objects(s3, "bkt", objects)
    cache = tmp_path / "cache"
    # --max-rate keeps the first 3 samples (6 MB) from landing before the lookup below is made
    # (about 0.6 s at 8 MiB/s; unthrottled they take a few ms, less than the poll interval).
    sp = start_sampler(cache, "s3://bkt", *s3_args(s3), "--min-samples", "3", "--concurrency", "2",
                       "--max-rate", "8Mi", env=s3_env(s3.endpoint))
    try:
        with Store(cache) as store:
            wait_until(lambda: catalog_count(store) == 30, what="catalog")
            assert store.request_cut(0) is False  # as the FUSE view does on a lookup of epoch-0
            wait_until(lambda: store.epochs(), what="epoch 0 cut once 3 samples are complete")
            assert store.epochs()[0].samples >= 3
    finally:
        rc = sp.stop()
    assert rc == 0, sp.log_text()[-2000:]
    assert "cut epoch 0 on request" in sp.log_text()
    assert "stopped cleanly" in sp.log_text()
    verify_cache(cache, objects)
    assert Store(cache).stats().inflight_bytes == 0


def test_schedule_mode_under_capacity_pressure(s3: S3Server, tmp_path: Path) -> None:
    """Windows trimmed to the epoch budget: same epochs on two nodes, capacity held throughout.

    The cache holds 20 objects, an epoch 15. The windows are 12, 15, 19 and 23 keys: epochs 2
    and 3 are trimmed at the front, and epoch 3's four new keys fit only once the samples that
    retired epoch 1 alone held are evicted (after the retire grace). Each epoch costs the
    sampler's wait on a catalog found empty (about 1 s): four epochs, not more, on two nodes
    running at once."""
    from epochfs.sidecar.store import Schedule

    size, count, capacity = 3000, 30, 60_000
    objects = random_objects(count, size)
    put_objects(s3, "bkt", objects)
    order = sampling_order(3, list(objects))
    schedule = Schedule(initial=12, growth=1.25)
    budget_objects = int(capacity * 0.75) // size
    expected = {}
    for n in range(4):
        hi = min(count, schedule.size(n))
        expected[n] = sorted(order[max(0, hi - budget_objects):hi])
    caches = [tmp_path / "a", tmp_path / "b"]
    lists: list[dict[int, list[str]]] = [{}, {}]
    with contextlib.ExitStack() as nodes:  # two nodes at once; each cache is watched while either waits
        samplers, stores = [], []
        for cache, concurrency in zip(caches, ("1", "16"), strict=True):
            samplers.append(nodes.enter_context(running_sampler(
                cache, "s3://bkt", *s3_args(s3), "--seed", "3", "--schedule", str(schedule),
                "--capacity", str(capacity), "--keep-epochs", "1", "--concurrency", concurrency,
                "--retire-grace", "1", env=s3_env(s3.endpoint))))
            stores.append(nodes.enter_context(Store(cache)))
        for n in range(4):
            for store, got in zip(stores, lists, strict=True):
                def ready(n: int = n, store: Store = store) -> bool:
                    for cache in caches:
                        assert disk_bytes(cache) <= capacity, cache
                    return store.cut(n) is not None

                wait_until(ready, what=f"epoch {n} cut", interval=0.02)
                got[n] = sorted(f.path for f in store.epoch_files(n))
        for sp in samplers:
            assert sp.stats()["evicted_total"] > 0
            # Each cut's retired epoch frees its room after --retire-grace: a wait, not a stuck window.
            assert "schedule mode is stuck" not in sp.log_text(), sp.log_text()[-3000:]
    for cache in caches:
        verify_cache(cache, objects)
    assert lists[0] == lists[1] == expected


def test_http_remote_with_an_index(tmp_path: Path) -> None:
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    root = tmp_path / "site"
    objects = random_objects(15, 7000, prefix="shards/")
    for key, body in objects.items():
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(body)
    keys = sorted(objects)
    # Sizes given for most keys; two without a size cost one HEAD each; one unsafe key is skipped.
    lines = [f"{k}\t{len(objects[k])}" for k in keys[:-2]] + keys[-2:] + ["../etc/passwd\t10", "# comment"]
    (root / "index.txt").write_text("\n".join(lines) + "\n")

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        cache = tmp_path / "cache"
        with running_sampler(cache, url) as sp:
            wait_until(fetched(sp, len(objects)), what="every indexed object")
        assert verify_cache(cache, objects) == len(objects)
        assert Store(cache).stats().skipped_total == 1
    finally:
        server.shutdown()
        server.server_close()


def test_one_sampler_per_cache(tmp_path: Path) -> None:
    import subprocess

    from sampler_helpers import EPOCHFS

    root = tmp_path / "data"
    root.mkdir()
    (root / "a.bin").write_bytes(b"a")
    cache = tmp_path / "cache"
    with running_sampler(cache, root.as_uri()) as sp:
        second = subprocess.run([EPOCHFS, "--log-level", "ERROR", "sample", "--remote", root.as_uri(),
                                 "--cache", str(cache)], capture_output=True, text=True, timeout=60)
        assert second.returncode == 2
        assert second.stderr.strip() == (
            f"epochfs sample: --cache: {cache} is in use by another epochfs sample "
            f"(pid {sp.proc.pid}); one sampler per cache"
        )
    # Released at exit (and by the kernel on kill -9): a new sampler starts.
    with running_sampler(cache, root.as_uri()) as sp:
        wait_until(fetched(sp, 1), what="the object")
