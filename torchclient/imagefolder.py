"""Class folders of images with labels that stay the same in every epoch.

:class:`EpochImageFolder` is torchvision's ``ImageFolder`` over ``epoch-N/<folder>`` (the same
``classes``, ``class_to_idx``, ``samples``, ``targets``; items ``(image, class index)``), with the
class indexes of the mount's ``.epochfs/classes.json``: an epoch that lacks a class does not move
the others, and a class that appears later takes the next index. It needs no torchvision: images
are decoded by ``decode="image"`` (torchvision.io where installed, Pillow otherwise) to
``(3, H, W)`` uint8 tensors in the DataLoader's workers, where ``transform`` runs too.

:func:`find_classes` is the same map in the shape of ``ImageFolder.find_classes``, for code that
keeps torchvision's own class (docs/torchclient.md, "Class folders of images")::

    class StableImageFolder(torchvision.datasets.ImageFolder):
        def find_classes(self, directory):
            return epochfs.torchclient.find_classes(directory)

    StableImageFolder(f"{root}/epoch-{n}/train", allow_empty=True)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .dataset import EpochDataset
from .decode import Decoder
from .labels import ClassMapError, check_class_root
from .layout import CONTROL_DIR, ROOT_KEY, read_classes
from .mountroot import mount_root

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
"""torchvision's ``IMG_EXTENSIONS``: the files ImageFolder takes by default, in any case."""
IMAGE_FILES = tuple("*." + "".join(f"[{c.lower()}{c.upper()}]" for c in ext[1:]) for ext in IMAGE_EXTENSIONS)
""":data:`IMAGE_EXTENSIONS` as ``include`` globs (case-insensitive, as ImageFolder's check is)."""


class EpochImageFolder(EpochDataset):
    """``ImageFolder`` over ``root/epoch-<epoch>/<folder>`` with stable class indexes.

    ``folder``: the class root inside the epoch (``"train"``; ``"."`` the epoch's own folder).
    ``decode`` (default ``"image"``), ``transform`` and the other keywords are
    :class:`~epochfs.torchclient.dataset.EpochDataset`'s; ``classes=`` fixes the map instead of
    ``classes.json`` (pass ``train.class_to_idx`` to a validation set, so both agree whatever
    each folder holds). With the image decoder, ``include`` defaults to the image files
    ImageFolder takes (:data:`IMAGE_EXTENSIONS`, any case): a ``.DS_Store`` or a ``notes.txt`` in a
    class folder, common in buckets uploaded from a laptop, would otherwise fail the epoch at its
    decode; another ``decode`` takes every file, as before.
    """

    def __init__(self, root: str | os.PathLike[str], epoch: int, folder: str = "train", *,
                 decode: str | Decoder = "image", transform: Callable[[Any], Any] | None = None,
                 classes: Mapping[str, int] | Sequence[str] | None = None, **kwargs: Any) -> None:
        for own in ("label", "class_root"):
            if own in kwargs:
                raise TypeError(f"EpochImageFolder sets {own} itself (use folder=)")
        if decode == "image":  # a decoder of one's own may read other files (.npy frames, ...)
            kwargs.setdefault("include", list(IMAGE_FILES))
        super().__init__(root, epoch, decode=decode, transform=transform, label="folder",
                         class_root=folder, classes=classes, **kwargs)

    @property
    def samples(self) -> list[tuple[str, int]]:
        """(path, class index) of every image, as ImageFolder's ``samples``."""
        assert self.targets is not None
        return [(str(self.dir / path), target) for path, target in zip(self.files, self.targets, strict=True)]

    @property
    def imgs(self) -> list[tuple[str, int]]:
        return self.samples

    def __repr__(self) -> str:
        return (f"EpochImageFolder(root={str(self.root)!r}, epoch={self.epoch}, folder={self.class_root!r}, "
                f"images={len(self.files)}, classes={len(self.classes)})")


def find_classes(directory: str | os.PathLike[str]) -> tuple[list[str], dict[str, int]]:
    """``(classes, class_to_idx)`` of ``directory`` (a folder inside ``<mount>/epoch-N/``) from the
    mount's ``.epochfs/classes.json``: a drop-in for ``ImageFolder.find_classes``. ``classes``
    are the names by index, every class the cache knows (some may have no folder in this epoch:
    give ImageFolder ``allow_empty=True``). ClassMapError where the mount has no classes.json, and
    where ``directory`` holds no class folders the mount knows (a typo'd path): an empty map would
    make an empty dataset without a word, where torchvision's own raises FileNotFoundError."""
    path = Path(os.path.abspath(directory))
    root = mount_root(path)  # the outermost epoch-N beside .epochfs/: a dataset may name folders so
    if root is None or not (root / CONTROL_DIR).is_dir():
        real = Path(os.path.realpath(path))  # through ``latest`` (a link to the newest epoch)
        real_root = mount_root(real)
        if real_root is not None:
            path, root = real, real_root
    if root is None:
        raise ClassMapError(f"{directory} is not inside an epoch-N/ folder of an epochfs mount")
    inside = "/".join(path.relative_to(root).parts[1:])
    maps = read_classes(root)
    if maps is None:
        raise ClassMapError(f"{root} has no .epochfs/classes.json (not an epochfs mount of this version)")
    mapping = dict(maps.get(check_class_root(inside), {}))
    if not mapping:
        known, epoch = sorted(maps), path.relative_to(root).parts[0]
        shown = ", ".join(str(root / epoch / name) if name != ROOT_KEY else f"{root / epoch} (itself)"
                          for name in known[:10])
        shown += f" and {len(known) - 10} more" if len(known) > 10 else ""
        raise ClassMapError(f"{directory} has no class folders in the mount's class map: a class root is a "
                            f"folder whose subfolders hold the images; the mount's are {shown or 'none yet'}")
    return [name for name, _ in sorted(mapping.items(), key=lambda item: item[1])], mapping
