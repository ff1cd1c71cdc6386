"""A remote prefix that lists nothing (a typo, or objects not uploaded yet) is said where users
look: a warning in the log, a line in ``epochfs status``, the reason of ``/readyz``; the sidecar
keeps running (it is not a refused setting: the objects may come) (issue 21)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from common import wait_until
from sidecar_helpers import EPOCHFS, running_sidecar

EPOCH0_5_OF_1000 = re.compile(r"epoch 0: 5/1000 samples cached; --min-samples 1000 is more than the 5 "
                              r"objects the complete listing holds for this node: epoch 0 is never cut; "
                              r"lower --min-samples")
"""/readyz's reason with 5 of the 1,000 samples epoch 0 needs cached, once the listing is complete:
the 5 are all there are, so it says that epoch 0 never comes (before: the count alone, for ever)."""


@pytest.mark.fuse
def test_an_empty_prefix_is_the_reason_readyz_gives_and_status_warns(tmp_path: Path) -> None:
    remote = tmp_path / "data" / "trian"  # a typo of train/: an empty folder
    remote.mkdir(parents=True)
    with running_sidecar(tmp_path, remote=f"file://{remote}", endpoint="", expect_ready=False) as car:
        def reason() -> str:
            code, body = car.get("/readyz")
            return "" if code != 503 or not body else str(json.loads(body).get("reason", ""))

        wait_until(lambda: "0 objects under" in reason(), timeout=60, what="/readyz's reason")
        assert f"file://{remote}" in reason() and "check --remote's prefix" in reason()
        # The log line follows the listing's end, which status and /readyz show from its commit on.
        wait_until(lambda: "WARNING" in car.log_text() and "0 objects under" in car.log_text(), timeout=30,
                   what="the log's warning")
        out = subprocess.run([*EPOCHFS, "status", "--cache", str(car.cache)], capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert "WARNING: 0 objects under" in out.stdout, out.stdout
        assert car.proc.poll() is None, "an empty listing is a warning, not a stop"


def test_a_listing_with_objects_has_no_warning(tmp_path: Path) -> None:
    from epochfs.sidecar.store import CatalogRow, Store
    from epochfs.sidecar.store.index import Meta

    store = Store(tmp_path / "cache", create=True)
    store.set_meta(Meta.SAMPLER_REMOTE, "s3://bucket/train")
    store.finalize_catalog()
    assert store.listing_known()["warning"] == "0 objects under s3://bucket/train for this node: " \
        "check --remote's prefix"
    store.add_catalog([CatalogRow("a.bin", "sid", 1, "v", rank=0)])
    store.finalize_catalog()
    assert "warning" not in store.listing_known()
    store.close()


@pytest.mark.fuse
def test_readyz_says_how_far_epoch_0_is(tmp_path: Path) -> None:
    """Not ready because epoch 0 needs more samples than are cached: /readyz's reason says how
    many of how many (issue 21, "the way to epoch 0")."""
    remote = tmp_path / "data"
    remote.mkdir()
    for i in range(5):
        (remote / f"{i}.bin").write_bytes(b"x" * 100)
    with running_sidecar(tmp_path, remote=f"file://{remote}", endpoint="", expect_ready=False,
                         extra=("--min-samples", "1000")) as car:
        def reason() -> str:
            code, body = car.get("/readyz")
            return "" if code != 503 or not body else str(json.loads(body).get("reason", ""))

        wait_until(lambda: EPOCH0_5_OF_1000.fullmatch(reason()), timeout=60,
                   what="/readyz's reason counting the samples")


def test_a_listing_whose_globs_left_out_every_key_says_so(tmp_path: Path) -> None:
    """Not 'check --remote's prefix' when the keys are there but --include/--exclude left them all
    out: the warning says that, and the count is the listing's own, not an error."""
    from epochfs.sidecar.store import Store
    from epochfs.sidecar.store.index import Meta
    from epochfs.sidecar.store.listings import PageRows, Part

    store = Store(tmp_path / "cache", create=True)
    store.set_meta(Meta.SAMPLER_REMOTE, "s3://bucket/train")
    listings = store.listings()
    gen = listings.begin([Part(0, "", "", None)], "list")
    listings.commit_pages(gen, [PageRows(Part(0, "", "", None, after="z", done=True), [], 0, [], None, 12)])
    listings.finish(gen)
    known = store.listing_known()
    assert known["excluded"] == 12 and store.stats().skipped_total == 0
    assert known["warning"] == ("0 objects kept of 12 under s3://bucket/train for this node: "
                                "--include/--exclude left out every key")
    store.close()
