"""``--include``/``--exclude`` on the sidecar (issue 22, "Choose the files"): over a prefix holding
``arrays/*.npy`` beside ``train/<class>/*.png`` and a few ``*.json``, the keys the globs leave out
are never cataloged nor fetched, are counted apart from the skips (the catalog's log line, status's
listing ``excluded`` and its "left out by --include/--exclude" line, never an error),
and a change of the globs lists afresh. In-process over the paged in-memory remote (the listing
and the sampler as ``epochfs sample`` wires them), then through the real ``epochfs sample`` over a
``file://`` folder and S3 (moto), and bad globs refused with exit 2 through the real CLI."""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from common import S3Server, put_objects, wait_until
from inprocess import settings_for, start_recording
from sampler_helpers import index_rows, running_sampler, s3_env, verify_cache

from epochfs.sidecar import config, keyorder
from epochfs.sidecar.config import SamplerSettings, SidecarSettings
from epochfs.sidecar.listing import CatalogReport, Lister, ListingThread, source_for
from epochfs.sidecar.remote.testing import PagedMemoryRemote
from epochfs.sidecar.sampler import Sampler
from epochfs.sidecar.status import render
from epochfs.sidecar.store import Meta, Store

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))
CLASSES = ("cat", "dog", "eel")


def mixed_objects() -> dict[str, bytes]:
    """The issue's prefix: arrays beside class folders of images, and a few JSON files."""
    objects = {f"arrays/{i:04d}.npy": b"\x93NUMPY" + bytes([i]) * 200 for i in range(24)}
    objects |= {f"train/{c}/{i:04d}.png": b"\x89PNG" + bytes([i, j]) * 100
                for j, c in enumerate(CLASSES) for i in range(8)}
    objects |= {"meta.json": b"{}", "arrays/index.json": b"[]", "train/cat/labels.json": b'{"a": 1}'}
    return objects


OBJECTS = mixed_objects()
NPY = sorted(k for k in OBJECTS if k.endswith(".npy"))
PNG = sorted(k for k in OBJECTS if k.endswith(".png"))
JSON = sorted(k for k in OBJECTS if k.endswith(".json"))


def catalog_keys(store: Store) -> list[str]:
    return sorted(str(r[0]) for r in store._ix.query("SELECT key FROM catalog"))


def cached_keys(store: Store) -> list[str]:
    return sorted(str(r[0]) for r in store._ix.query("SELECT key FROM samples"))


def list_once(store: Store, remote: PagedMemoryRemote, *, fresh: bool = False, shard: int = 0,
              shards: int = 1, **globs: Any) -> tuple[Lister, CatalogReport]:
    lst = Lister(store, source_for(remote), seed=0, threads=2, shard_index=shard, shard_count=shards,
                 **globs)
    return lst, lst.run(fresh=fresh or not lst.needed())


# ---------------------------------------------------------------------------- in-process
def test_include_catalogs_and_fetches_only_the_matching_keys(tmp_path: Path,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    """The listing beside the sampler, as ``epochfs sample`` runs them: with ``--include '*.npy'``
    the catalog and the cache hold the arrays only, and no other key is ever opened."""
    remote = PagedMemoryRemote(OBJECTS, page=5)
    settings = settings_for(tmp_path / "c", "--capacity", "4Mi", "--include", "*.npy")
    assert settings.include == ("*.npy",)
    store = Store(tmp_path / "c", create=True)
    store.configure(settings.policy())
    stop = threading.Event()
    lst = Lister(store, source_for(remote), seed=0, threads=4, stop=stop, include=settings.include,
                 exclude=settings.exclude)
    reports: list[CatalogReport] = []
    listing = ListingThread(lst, prepared=lst.prepare(), on_complete=reports.append)
    sampler = Sampler(store=store, remote=remote, settings=settings, stop=stop,
                      listing=listing.running.is_set)
    caplog.set_level(logging.INFO, logger="epochfs.catalog")
    listing.start()
    thread, errors = start_recording(sampler.run)
    try:
        wait_until(lambda: bool(reports) and store.stats().samples == len(NPY), what="every array fetched")
        wait_until(lambda: store.stats().inflight_bytes == 0, what="nothing in flight")
    finally:
        stop.set()
        thread.join(timeout=30)
        listing.join(timeout=30)
    assert not errors, errors
    try:
        assert catalog_keys(store) == NPY
        assert cached_keys(store) == NPY
        assert set(remote.opens) == set(NPY), "a key left out was opened"
        report = reports[0]
        assert (report.listed, report.added, report.excluded) == (
            len(OBJECTS), len(NPY), len(PNG) + len(JSON))
        stats = store.stats()
        assert stats.skipped_total == 0 and stats.catalog_objects == len(NPY)
        assert stats.listing["excluded"] == len(PNG) + len(JSON)
        text = render(stats.to_json())
        assert f"{len(PNG) + len(JSON)} key(s) left out by --include/--exclude" in text
        assert "errors: 0 object(s) skipped" in text
        line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("catalog: "))
        assert f"{len(NPY)} cataloged, {len(PNG) + len(JSON)} left out by --include/--exclude" in line
    finally:
        store.close()


@pytest.mark.parametrize(
    ("globs", "expected"),
    [
        ({"include": "*.npy"}, NPY),
        ({"exclude": "**/*.json"}, sorted(NPY + PNG)),
        ({"exclude": ["*.json", "train/dog/**"]}, sorted(NPY + [k for k in PNG if "/dog/" not in k])),
        ({"include": "train/**", "exclude": "*.json"}, PNG),
        ({"include": "train/*/*.png,/*.json", "exclude": "train/eel/"},
         sorted([k for k in PNG if "/eel/" not in k] + ["meta.json"])),
    ],
)
def test_include_exclude_and_both_choose_the_catalog(tmp_path: Path, globs: dict[str, Any],
                                                     expected: list[str]) -> None:
    remote = PagedMemoryRemote(OBJECTS, page=7)
    with Store(tmp_path / "c", create=True) as store:
        _, report = list_once(store, remote, **globs)
        assert catalog_keys(store) == expected
        left_out = len(OBJECTS) - len(expected)
        assert (report.added, report.excluded, report.complete) == (
            len(expected), left_out, True)
        assert store.stats().skipped_total == 0 and store.stats().listing["excluded"] == left_out
        # A relist of the same choice counts the same (the last listing's), not twice.
        _, again = list_once(store, remote, fresh=True, **globs)
        assert again.excluded == left_out
        assert store.stats().listing["excluded"] == left_out and catalog_keys(store) == expected


def test_only_this_shards_keys_are_counted_as_left_out(tmp_path: Path) -> None:
    remote = PagedMemoryRemote(OBJECTS, page=10)
    mine = [k for k in OBJECTS if keyorder.in_shard(k, 1, 3)]
    with Store(tmp_path / "c", create=True) as store:
        _, report = list_once(store, remote, shard=1, shards=3, include="*.npy")
        assert catalog_keys(store) == sorted(k for k in mine if k.endswith(".npy"))
        assert report.in_shard == len(mine)
        assert report.excluded == len([k for k in mine if not k.endswith(".npy")])


def test_other_globs_list_afresh_and_drop_the_rows_they_leave_out(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    """The globs are recorded with the listing's source (as ``--index`` is): a start with other
    globs lists again and its end drops the rows it did not take; the same choice in another order
    is no change; going back to no globs lists again."""
    remote = PagedMemoryRemote(OBJECTS, page=10)
    with Store(tmp_path / "c", create=True) as store:
        list_once(store, remote)
        assert catalog_keys(store) == sorted(OBJECTS)
        assert store.meta(Meta.LISTING_SOURCE) == "list"  # a cache listed without globs is unchanged
        caplog.set_level(logging.INFO, logger="epochfs.catalog")
        lst, report = list_once(store, remote, include="*.npy,train/cat/**", exclude="*.json")
        assert "listing afresh" in caplog.text
        expected = sorted(NPY + [k for k in PNG if "/cat/" in k])
        assert catalog_keys(store) == expected
        assert report.dropped == len(OBJECTS) - len(expected)
        assert store.meta(Meta.LISTING_SOURCE) == lst.listing_name != "list"
        same = Lister(store, source_for(remote), seed=0, include=["train/cat/**", "*.npy", "*.npy"],
                      exclude=" *.json")
        assert not same.needed(), "the same globs in another order are the same choice"
        assert Lister(store, source_for(remote), seed=0, include="*.npy").needed()
        assert Lister(store, source_for(remote), seed=0).needed()
        list_once(store, remote)
        assert catalog_keys(store) == sorted(OBJECTS)


def test_an_interrupted_listing_resumes_with_the_same_globs_only(tmp_path: Path) -> None:
    remote = PagedMemoryRemote(OBJECTS, page=3)
    with Store(tmp_path / "c", create=True) as store:
        stop = threading.Event()
        pages: list[int] = []

        def on_page(report: object) -> None:
            pages.append(1)
            if len(pages) >= 3:
                stop.set()

        first = Lister(store, source_for(remote), seed=0, threads=1, stop=stop, on_page=on_page,
                       include="*.npy")
        assert not first.run().complete
        gen = store.listings().state().generation
        resumed = Lister(store, source_for(remote), seed=0, threads=1, include="*.npy")
        assert resumed.prepare()[0] == gen, "the same globs resume the running listing"
        other = Lister(store, source_for(remote), seed=0, threads=1, include="*.png")
        assert other.prepare()[0] == gen + 1, "other globs start a new listing"
        assert other.run(prepared=None).complete
        assert catalog_keys(store) == PNG


def test_the_settings_reach_the_sampler_child_through_its_environment() -> None:
    """``epochfs sidecar`` starts its sampler with EPOCHFS_* variables (to_env): the globs survive."""
    argv = ["--cache", "/tmp/c", "--mount", "/tmp/m", "--remote", "file:///data",
            "--include", "*.npy, a[,]b", "--exclude", "**/*.json"]
    settings = config.parse(SidecarSettings, argv, environ={})
    env = {k: v for k, v in config.to_env(settings, SamplerSettings).items() if v is not None}
    assert env["EPOCHFS_INCLUDE"] == "*.npy,a[,]b" and env["EPOCHFS_EXCLUDE"] == "**/*.json"
    child = config.parse(SamplerSettings, [], environ=env)
    assert (child.include, child.exclude) == (("*.npy", "a[,]b"), ("**/*.json",))
    unset = config.parse(SamplerSettings, ["--cache", "/tmp/c", "--remote", "file:///d"], environ={})
    assert (unset.include, unset.exclude) == (None, None)


# ---------------------------------------------------------------------------- the real command
def write_folder(root: Path, objects: dict[str, bytes]) -> None:
    for key, body in objects.items():
        path = root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--include", "*.npy"], NPY),
        (["--exclude", "**/*.json"], sorted(NPY + PNG)),
        (["--include", "train/**", "--exclude", "*.json"], PNG),
    ],
)
def test_epochfs_sample_over_a_file_folder(tmp_path: Path, args: list[str], expected: list[str]) -> None:
    root = tmp_path / "data"
    write_folder(root, OBJECTS)
    cache = tmp_path / "cache"
    left_out = len(OBJECTS) - len(expected)
    with running_sampler(cache, root.as_uri(), "--capacity", "10Mi", *args) as sp:
        wait_until(lambda: sp.stats()["samples"] == len(expected) and sp.stats()["inflight_bytes"] == 0
                   and bool(sp.stats()["listing"].get("complete")),
                   what="every chosen file fetched")
        assert f"{len(expected)} cataloged, {left_out} left out by --include/--exclude" in sp.log_text()
    assert verify_cache(cache, {k: OBJECTS[k] for k in expected}) == len(expected)
    assert sorted(str(r[0]) for r in index_rows(cache, "SELECT key FROM catalog")) == expected
    assert sorted(str(r[0]) for r in index_rows(cache, "SELECT key FROM samples")) == expected
    stats = sp.stats()
    assert stats["skipped_total"] == 0 and stats["fetched_total"] == len(expected)
    assert stats["listing"]["excluded"] == left_out
    out = subprocess.run([EPOCHFS, "status", "--cache", str(cache)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert f"listing: {left_out} key(s) left out by --include/--exclude" in out.stdout, out.stdout
    assert "errors: 0 object(s) skipped" in out.stdout, out.stdout


def test_epochfs_sample_over_s3(s3: S3Server, tmp_path: Path) -> None:
    """S3 lists in parallel spans (arrays/, then the class folders inside train/): each span's keys
    are filtered the same way."""
    put_objects(s3, "bkt", {f"ds/{k}": v for k, v in OBJECTS.items()})
    cache = tmp_path / "cache"
    expected = [k for k in PNG if "/dog/" not in k]
    with running_sampler(cache, "s3://bkt/ds", "--endpoint-url", s3.endpoint, "--capacity", "10Mi",
                         "--include", "train/**", "--exclude", "train/dog/**,*.json",
                         env=s3_env(s3.endpoint)) as sp:
        wait_until(lambda: sp.stats()["samples"] == len(expected) and sp.stats()["inflight_bytes"] == 0
                   and bool(sp.stats()["listing"].get("complete")),
                   what="every chosen object fetched")
    assert verify_cache(cache, {k: OBJECTS[k] for k in expected}) == len(expected)
    assert sorted(str(r[0]) for r in index_rows(cache, "SELECT key FROM catalog")) == expected
    assert sp.stats()["skipped_total"] == 0
    assert sp.stats()["listing"]["excluded"] == len(OBJECTS) - len(expected)


def run_cli(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}
    full_env.update(env or {})
    return subprocess.run([EPOCHFS, *args], capture_output=True, text=True, env=full_env, timeout=60)


@pytest.mark.parametrize(
    ("command", "extra", "env", "starts", "words"),
    [
        ("sample", ["--include", ""], {}, "--include", "an empty pattern"),
        ("sample", ["--include", "*.npy,,*.npz"], {}, "--include", "an empty pattern in '*.npy,,*.npz'"),
        ("sample", ["--exclude", "a**"], {}, "--exclude", "'**' must be a whole path component"),
        ("sample", ["--exclude", "train//x"], {}, "--exclude", "an empty path component"),
        ("sample", [], {"EPOCHFS_INCLUDE": "[z-a]"}, "--include (from EPOCHFS_INCLUDE)", "not a valid"),
        ("sidecar", ["--include", "./train/**"], {}, "--include", "a '.' component"),
        ("sidecar", [], {"EPOCHFS_EXCLUDE": ""}, "--exclude (from EPOCHFS_EXCLUDE)", "an empty pattern"),
    ],
)
def test_a_bad_glob_exits_2_naming_the_flag(tmp_path: Path, command: str, extra: list[str],
                                            env: dict[str, str], starts: str, words: str) -> None:
    root = tmp_path / "data"
    write_folder(root, {"a.npy": b"x"})
    args = [command, "--remote", root.as_uri(), "--cache", str(tmp_path / "c"), *extra]
    if command == "sidecar":
        args += ["--mount", str(tmp_path / "m")]
    proc = run_cli(args, env)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"epochfs {command}: {starts}: ") and words in lines[0], lines[0]
    assert not (tmp_path / "c").exists() and not (tmp_path / "m").exists()


def test_a_nul_in_a_glob_is_refused_where_a_value_can_hold_one() -> None:
    """argv and the environment cannot carry a NUL; the settings parser refuses one all the same."""
    with pytest.raises(config.ConfigError, match=r"^--include: .*NUL"):
        config.from_args(SamplerSettings, argparse.Namespace(
            cache="/tmp/c", remote="file:///d", include="a\x00b"), environ={})
