"""A shard the listing found empty while other shards' objects were listed is said to be that, not a
mistyped prefix.

Before: ``epochfs sample --shard-index 1 --shard-count 100`` over 60 keys logged "0 objects under
s3://bsmall/ds for this node ... check --remote's prefix", and ``epochfs status`` warned the same:
the prefix was right, the shard was empty (60 keys over 100 shards leave most shards none). A real
``epochfs sample`` over a ``file://`` folder, a real ``epochfs status``.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from common import wait_until
from sampler_helpers import EPOCHFS, index_rows, start_sampler

from epochfs.sidecar.keyorder import shard_of
from epochfs.sidecar.store import Meta

COUNT, SHARDS = 60, 100
ENV = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}


def _listed_to_the_end(cache: Path) -> bool:
    return bool(index_rows(cache, "SELECT 1 FROM meta WHERE name=?", (Meta.LISTING_COMPLETE.value,)))


def test_an_empty_shard_is_not_called_a_mistyped_prefix(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    names = [f"{i:03d}.bin" for i in range(COUNT)]
    for name in names:
        (data / name).write_bytes(os.urandom(64))
    taken = {shard_of(name, SHARDS) for name in names}
    empty = min(s for s in range(SHARDS) if s not in taken)
    cache = tmp_path / "cache"
    sampler = start_sampler(cache, data.as_uri(), "--capacity", "1Mi", "--shard-index", str(empty),
                            "--shard-count", str(SHARDS))
    try:
        wait_until(lambda: (_listed_to_the_end(cache) and "0 objects under" in sampler.log_text())
                   or not sampler.alive(), timeout=60, what="the empty shard listed to its end")
        assert sampler.alive(), sampler.log_text()[-3000:]
    finally:
        assert sampler.stop() == 0, sampler.log_text()[-3000:]

    said = (f"0 objects under {data.as_uri()} for shard {empty} of {SHARDS}: this node's shard is empty "
            f"({COUNT} object(s) listed, all in the other {SHARDS - 1} shards); use fewer shards "
            "(--shard-count) or more data")
    [logged] = [x for x in sampler.log_text().splitlines() if "0 objects under" in x]
    assert said in logged and "prefix" not in logged, logged
    status = subprocess.run([EPOCHFS, "status", "--cache", str(cache), "--json"], capture_output=True,
                            text=True, timeout=120, env=ENV)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["listing"]["warning"] == said
    shown = subprocess.run([EPOCHFS, "status", "--cache", str(cache)], capture_output=True, text=True,
                           timeout=120, env=ENV)
    assert f"listing: complete; WARNING: {said}" in shown.stdout.splitlines(), shown.stdout
