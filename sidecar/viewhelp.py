"""The help texts of the view's flags, which several settings classes declare (``--mount`` of
``epochfs mount``, ``publish`` and ``sidecar``, ``--view``, ``--warm-files``, ``--fuse-api``):
apart from :mod:`.config`, whose classes they are read by, so that one text serves each flag.
"""

from __future__ import annotations

FUSE_API_HELP = ("libfuse API the FUSE server uses: lowlevel (inode numbers computed, nothing kept per "
                 "file) or highlevel (libfuse keeps a node per file the kernel holds; docs/mount.md)")
WARM_HELP = "most symlinks of a new epoch warmed in the kernel's cache (0: no warm-up)"
MOUNT_HELP = ("where the view is mounted: an empty folder, created when missing if its parent exists; "
              "in a pod a subdirectory of the shared volume, never the volume's own mount point")
PUBLISH_HELP = ("the folder the view is published into: an empty folder, or one it published before "
                "(created when missing if its parent exists): in a pod a subdirectory of "
                "the volume shared with the trainer")
VIEW_HELP = ("fuse: a FUSE mount (a privileged sidecar in Kubernetes; any lookup of epoch-N asks for its "
             "cut); folder: the same layout published as plain files into --mount, no privilege needed "
             "(docs/folderview.md)")

__all__ = ["FUSE_API_HELP", "MOUNT_HELP", "PUBLISH_HELP", "VIEW_HELP", "WARM_HELP"]
