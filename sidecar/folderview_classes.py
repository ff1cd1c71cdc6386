"""``classes.json`` for the folder view: rendered by the view's renderer (:mod:`epochfs.fuse.classes`,
as the FUSE view serves it), and for an epoch shown from the tree built ahead, with that epoch's
folders taken from the tree itself, which is never built a second time as an :class:`EpochTree`.
"""

from __future__ import annotations

from epochfs.fuse.view import EpochTree, View


class _Folders:
    """What ``classes.json``'s renderer asks of an epoch's tree, from the tree built ahead."""

    def __init__(self, paths: list[str]) -> None:
        self.paths = paths

    def folder_paths(self) -> list[str]:
        return self.paths


def render_classes(view: View, *, folders: tuple[int, list[str]] | None = None) -> bytes:
    """``classes.json`` with the folders of every live epoch recorded (the one being published
    included). ``folders``: epoch N's folders as the tree built ahead has them (the renderer reads
    every other epoch's from the view)."""
    if folders is None:
        return view.render_classes()
    n, paths = folders
    live = [e.epoch for e in view.store.epochs()]
    if any(m not in view.snapshot.live for m in live if m != n):
        view.refresh()  # cut since the last refresh: its tree is needed now

    def tree(m: int) -> EpochTree:
        return _Folders(paths) if m == n else view.tree(m)  # type: ignore[return-value]

    return view.classes.render(live, tree)


__all__ = ["render_classes"]
