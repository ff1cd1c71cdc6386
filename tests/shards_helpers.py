"""Shard files as the libraries that read them write them: WebDataset tar shards of PNG images and
labels, Parquet files of feature vectors and labels (docs/shards.md; tests/torchclient/test_docs_shards.py).

Each shard's content is a pure function of its number, so a test can say what a whole shard holds.
"""

from __future__ import annotations

import io
import tarfile

import numpy as np
from PIL import Image

IMAGE_SIDE = 32
FEATURES = 8


def png(seed: int, side: int = IMAGE_SIDE) -> bytes:
    rng = np.random.default_rng(seed)
    out = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (side, side, 3), dtype=np.uint8), "RGB").save(out, format="PNG")
    return out.getvalue()


def tar_shard(shard: int, per_shard: int, classes: int = 10) -> bytes:
    """A WebDataset shard: ``<key>.png`` and ``<key>.cls`` (the label as text) per sample, keys
    ``s<shard>-<i>``, each sample's files next to each other, as ``webdataset.TarWriter`` writes."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for i in range(per_shard):
            key = f"s{shard:05d}-{i:04d}"
            label = str((shard + i) % classes).encode()
            for ext, body in (("png", png(shard * 100_003 + i)), ("cls", label)):
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size, info.mtime, info.mode = len(body), 0, 0o644
                tar.addfile(info, io.BytesIO(body))
    return out.getvalue()


def parquet_shard(shard: int, rows: int) -> bytes:
    """A Parquet file: ``features`` (FEATURES float32 per row, a fixed-size list), ``label`` (0 or 1),
    ``row`` (a number unique over every shard: shard * 1,000,000 + i)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(shard)
    x = rng.standard_normal((rows, FEATURES), dtype=np.float32)
    table = pa.table({
        "features": pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), FEATURES),
        "label": pa.array((x.sum(axis=1) > 0).astype(np.int64)),
        "row": pa.array(np.arange(rows, dtype=np.int64) + shard * 1_000_000),
    })
    out = io.BytesIO()
    pq.write_table(table, out)
    return out.getvalue()


def tar_members(body: bytes) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        return tar.getnames()
