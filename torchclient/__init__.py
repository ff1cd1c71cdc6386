"""epochfs.torchclient: torch Datasets and loaders over the epoch-N/ folders of an epochfs mount.

Knows only the mount's file layout (:mod:`.layout`), so it works on any folder shaped like the mount
and imports nothing from the sidecar or the FUSE server.

The public names are imported lazily, on first use: importing this package (which every import of
``epochfs.torchclient.layout`` does first) must not import torch, so that the FUSE server, which
reads the layout contract from :mod:`.layout`, never loads it. ``from epochfs.torchclient import
EpochLoader`` works, and imports torch then.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what static tools see; at run time __getattr__ below imports on demand
    from .arrayloader import ArrayEpochRun, ArrayLoader, default_num_threads
    from .arrays import ArraySampleError
    from .collate import BatchMembersError, BatchShapeError
    from .dataset import EpochDataset
    from .decode import (
        SampleDecodeError,
        decode_auto,
        decode_bytes,
        decode_image,
        decode_npy,
        decode_npz,
        decode_pt,
    )
    from .imagefolder import EpochImageFolder, find_classes
    from .labels import ClassMapError
    from .layout import (
        Manifest,
        ManifestEntry,
        ManifestError,
        list_epochs,
        read_classes,
        read_manifest,
        read_status,
    )
    from .loader import EpochLoader, EpochRun, EpochStats, default_num_workers
    from .lost import SampleLostError
    from .npyheader import NpyHeaderError, NpzMemberError
    from .peers import EpochSkewError, PeerEpochError
    from .resume import EpochResumeError
    from .sampler import EpochSampler, epoch_indices, rank_shards
    from .shardcheck import ShardSettingsError
    from .startepoch import start_epoch
    from .stream import EpochStream
    from .waiting import wait_for_epoch
    from .world import World

_SUBMODULE = {
    "ArrayEpochRun": "arrayloader",
    "ArrayLoader": "arrayloader",
    "default_num_threads": "arrayloader",
    "ArraySampleError": "arrays",
    "BatchMembersError": "collate",
    "BatchShapeError": "collate",
    "EpochDataset": "dataset",
    "wait_for_epoch": "waiting",
    "SampleDecodeError": "decode",
    "SampleLostError": "lost",
    "decode_auto": "decode",
    "decode_bytes": "decode",
    "decode_image": "decode",
    "EpochImageFolder": "imagefolder",
    "find_classes": "imagefolder",
    "ClassMapError": "labels",
    "decode_npy": "decode",
    "decode_npz": "decode",
    "decode_pt": "decode",
    "Manifest": "layout",
    "ManifestEntry": "layout",
    "ManifestError": "layout",
    "list_epochs": "layout",
    "read_classes": "layout",
    "read_manifest": "layout",
    "read_status": "layout",
    "EpochLoader": "loader",
    "EpochRun": "loader",
    "EpochStats": "loader",
    "default_num_workers": "loader",
    "NpyHeaderError": "npyheader",
    "NpzMemberError": "npyheader",
    "EpochSkewError": "peers",
    "PeerEpochError": "peers",
    "EpochResumeError": "resume",
    "EpochSampler": "sampler",
    "epoch_indices": "sampler",
    "rank_shards": "sampler",
    "ShardSettingsError": "shardcheck",
    "start_epoch": "startepoch",
    "EpochStream": "stream",
    "World": "world",
}

# A literal list, as linters read it; tests/torchclient/test_layout.py checks it matches _SUBMODULE.
__all__ = [
    "ArrayEpochRun",
    "ArrayLoader",
    "ArraySampleError",
    "BatchMembersError",
    "BatchShapeError",
    "ClassMapError",
    "EpochDataset",
    "EpochImageFolder",
    "EpochLoader",
    "EpochResumeError",
    "EpochRun",
    "EpochSampler",
    "EpochSkewError",
    "EpochStats",
    "EpochStream",
    "Manifest",
    "ManifestEntry",
    "ManifestError",
    "NpyHeaderError",
    "NpzMemberError",
    "PeerEpochError",
    "SampleDecodeError",
    "SampleLostError",
    "ShardSettingsError",
    "World",
    "decode_auto",
    "decode_bytes",
    "decode_image",
    "decode_npy",
    "decode_npz",
    "decode_pt",
    "default_num_threads",
    "default_num_workers",
    "epoch_indices",
    "find_classes",
    "list_epochs",
    "rank_shards",
    "read_classes",
    "read_manifest",
    "read_status",
    "start_epoch",
    "wait_for_epoch",
]


def __getattr__(name: str) -> Any:
    """Import the submodule that defines ``name`` on first access, and keep the name here."""
    submodule = _SUBMODULE.get(name)
    if submodule is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{submodule}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_SUBMODULE))
