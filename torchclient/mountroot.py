"""The mount above a path inside ``<mount>/epoch-N/``, found the same way by every caller.

A dataset may hold folders named like epochs (``runs/epoch-3/``, a key ``epoch-1/...``), so the
nearest ``epoch-N`` component of a path is not always the mount's epoch folder: reading the
mount's files (``.epochfs/classes.json``, ``lost.json``, ``status.json``) above it found none, or
read a sample of the dataset's own ``.epochfs/`` folder. The mount's epoch folder is the outermost
``epoch-N`` component with the control folder ``.epochfs/`` beside it. Shared by
:func:`.imagefolder.find_classes` and :mod:`.lost` so that both name the same mount.

Standard library only (workers import it through :mod:`.lost` with the decoders).
"""

from __future__ import annotations

import os
from pathlib import Path

from .layout import CONTROL_DIR, parse_epoch_name


def mount_root(folder: str | os.PathLike[str]) -> Path | None:
    """The mount (or published folder) holding ``folder``, which is an ``epoch-N`` folder or lies
    inside one; None outside any. The outermost ``epoch-N`` folder with a ``.epochfs/`` folder
    beside it (the mount's control folder); without a control folder anywhere (a plain copy of an
    epoch), the one above the nearest ``epoch-N`` folder. ``folder`` is taken as written, relative or
    not (the root is then too, for the caller's ``relative_to``), and no link is resolved."""
    path = Path(folder)
    nearest = found = None
    for epoch in (path, *path.parents):
        if parse_epoch_name(epoch.name) is not None:
            nearest = nearest or epoch.parent
            if os.path.isdir(epoch.parent / CONTROL_DIR):
                found = epoch.parent
    return found or nearest
