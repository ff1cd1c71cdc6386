"""epochfs.torchclient: torch Datasets and loaders over the epoch-N/ folders of an epochfs mount.

Knows only the mount's file layout (``layout``), so it works on any folder shaped like the mount and
imports nothing from the sidecar or the FUSE server.
"""

from .dataset import EpochDataset, wait_for_epoch
from .decode import SampleDecodeError, decode_auto, decode_bytes, decode_npy, decode_npz, decode_pt
from .layout import Manifest, ManifestEntry, ManifestError, list_epochs, read_manifest, read_status
from .loader import EpochLoader, EpochRun, EpochStats, default_num_workers
from .sampler import EpochSampler, epoch_indices
from .world import World

__all__ = [
    "EpochDataset",
    "EpochLoader",
    "EpochRun",
    "EpochSampler",
    "EpochStats",
    "Manifest",
    "ManifestEntry",
    "ManifestError",
    "SampleDecodeError",
    "World",
    "decode_auto",
    "decode_bytes",
    "decode_npy",
    "decode_npz",
    "decode_pt",
    "default_num_workers",
    "epoch_indices",
    "list_epochs",
    "read_manifest",
    "read_status",
    "wait_for_epoch",
]
