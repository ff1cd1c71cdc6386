"""Labels by class folder (``train/<class>/<file>``) that stay the same in every epoch.

torchvision's ``ImageFolder`` numbers the classes of a folder by the class folders it finds there,
sorted: over ``epoch-N/train`` an epoch that lacks one class shifts every later label by one,
silently. The sidecar keeps one list of folders per cache that only grows and publishes each
folder's index in ``.epochfs/classes.json`` (:mod:`.layout`); this module reads it:

* :func:`class_map` gives ``{class name: index}`` for a class root (``"train"``; ``"."`` the
  epoch's own folder), from ``classes.json`` where the mount has it. Without it (a plain folder
  shaped like the mount), from the class folders of every visible epoch up to this one, sorted,
  with a warning: those are stable only while no later epoch brings a class that sorts earlier.
* :func:`label_files` keeps the files inside a class folder of the root and gives each its label.

A class folder that ``classes.json`` lacks (it can only have been read before the epoch's folders
were recorded) is read again once; a class still missing is a :class:`ClassMapError` naming it.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .layout import ROOT_KEY, list_epochs, read_classes, read_manifest, walk_epoch


class ClassMapError(ValueError):
    """A class folder with no index, or a class map that cannot be used; the message says which."""


@dataclass(frozen=True)
class ClassMap:
    """The classes of one class root, by index."""

    class_to_idx: dict[str, int]
    source: str
    """Where it came from: ``"classes.json"``, ``"epochs"`` (no classes.json: the epochs' folders)
    or ``"given"`` (the ``classes=`` argument)."""

    @property
    def classes(self) -> list[str]:
        """The class names in index order (``classes[i]`` is the name of label i)."""
        return [name for name, _ in sorted(self.class_to_idx.items(), key=lambda item: item[1])]


def check_class_root(class_root: str) -> str:
    """``"train"``, ``"train/"`` -> ``"train"``; ``""`` and ``"."`` -> ``"."`` (the epoch's folder)."""
    if not isinstance(class_root, str):
        raise ValueError(f"class_root must be a folder path inside epoch-N/ (a str), got {class_root!r}")
    norm = class_root.strip("/")
    if norm in ("", ROOT_KEY):
        return ROOT_KEY
    if any(part in ("", ".", "..") for part in norm.split("/")) or "\0" in norm:
        raise ValueError(f"class_root must be a folder path inside epoch-N/ like 'train', got {class_root!r}")
    return norm


def _prefix(class_root: str) -> str:
    return "" if class_root == ROOT_KEY else class_root + "/"


def class_of(path: str, class_root: str) -> str | None:
    """The class folder of ``path`` under ``class_root`` (None: not inside one of its folders)."""
    prefix = _prefix(class_root)
    if not path.startswith(prefix):
        return None
    name, sep, _ = path[len(prefix):].partition("/")
    return name if sep and name else None


def check_classes(classes: Mapping[str, int] | Sequence[str]) -> dict[str, int]:
    """A ``classes=`` argument as ``{name: index}``: a mapping as it is, a list of names by index."""
    if isinstance(classes, Mapping):
        mapping = dict(classes)
    elif isinstance(classes, Sequence) and not isinstance(classes, str):
        mapping = {name: i for i, name in enumerate(classes)}
        if len(mapping) != len(classes):
            raise ValueError("classes: a list of class names must not repeat a name")
    else:
        raise ValueError("classes must be a mapping of class name to index or a list of names, "
                         f"got {classes!r}")
    if not all(isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0
               for k, v in mapping.items()):
        raise ValueError("classes: names must be str and indexes ints >= 0")
    return mapping


def _from_epochs(root: str | os.PathLike[str], epoch: int, class_root: str,
                 files: Iterable[str]) -> dict[str, int]:
    names = {c for c in (class_of(p, class_root) for p in files) if c is not None}
    for n in list_epochs(root):
        if n >= epoch:
            continue
        manifest = read_manifest(root, n)
        paths = manifest.paths if manifest is not None else [p for p, _ in walk_epoch(root, n)]
        names.update(c for c in (class_of(p, class_root) for p in paths) if c is not None)
    return {name: i for i, name in enumerate(sorted(names))}


def class_map(root: str | os.PathLike[str], epoch: int, class_root: str, files: Sequence[str], *,
              classes: Mapping[str, int] | Sequence[str] | None = None) -> ClassMap:
    """The class map of ``class_root`` for ``files`` (epoch ``epoch``'s paths): ``classes`` when
    given, else the mount's ``classes.json``, else the class folders of the visible epochs up to
    ``epoch`` (a warning says why that is weaker). Every class folder of ``files`` must have an
    index (ClassMapError otherwise, after one more read of ``classes.json``)."""
    if classes is not None:
        found = ClassMap(check_classes(classes), "given")
        maps = read_classes(root)
        if maps is not None and class_root not in maps and files:  # a map given for the wrong folder
            raise ClassMapError(_not_a_class_root(root, epoch, class_root, maps))
    else:
        maps = read_classes(root)
        if maps is None:
            warnings.warn(f"{root} has no .epochfs/classes.json (not an epochfs mount of this version): "
                          f"the classes of {class_root!r} are numbered from the class folders of the "
                          "epochs present, which changes the labels if a later epoch brings a class that "
                          "sorts before others; pass classes= to fix them", stacklevel=3)
            return ClassMap(_from_epochs(root, epoch, class_root, files), "epochs")
        if class_root not in maps and files:
            maps = read_classes(root) or {}  # once more: the server may have recorded it since
            if class_root not in maps:
                raise ClassMapError(_not_a_class_root(root, epoch, class_root, maps))
        found = ClassMap(dict(maps.get(class_root, {})), "classes.json")
    missing = _missing(files, class_root, found.class_to_idx)
    if missing and found.source == "classes.json":
        maps = read_classes(root) or {}
        found = ClassMap(dict(maps.get(class_root, {})), "classes.json")
        missing = _missing(files, class_root, found.class_to_idx)
    if missing:
        where = "the classes= given" if found.source == "given" else f"{root}/.epochfs/classes.json"
        named = ", ".join(sorted(missing)[:5]) + (" ..." if len(missing) > 5 else "")
        raise ClassMapError(f"class folder(s) {named} of {class_root!r} in epoch {epoch} have no index "
                            f"in {where}")
    return found


def _not_a_class_root(root: str | os.PathLike[str], epoch: int, class_root: str,
                      maps: Mapping[str, Mapping[str, int]]) -> str:
    """Why ``class_root`` has no classes although the epoch has files: the cache never held a
    folder under it (a typo, or the default ``"train"`` where the classes are at the top). An
    empty dataset would train for zero steps without a word, where torchvision's ImageFolder
    raises."""
    roots = sorted(r for r, classes in maps.items() if classes)
    named = ", ".join(repr(r) for r in roots[:8]) + (" ..." if len(roots) > 8 else "")
    return (f"{class_root!r} holds no class folder in {root} (epoch {epoch} has files, and the cache has "
            f"never held a folder under {class_root!r}); class roots with classes: {named or 'none'} "
            "('.' is the epoch's own folder): pass it as folder= / class_root=")


def _missing(files: Iterable[str], class_root: str, mapping: Mapping[str, int]) -> set[str]:
    return {c for c in (class_of(p, class_root) for p in files) if c is not None and c not in mapping}


def label_files(files: Sequence[str], class_root: str,
                mapping: Mapping[str, int]) -> tuple[list[int], list[int]]:
    """(indexes of the files inside a class folder of ``class_root``, their labels), in order."""
    keep: list[int] = []
    targets: list[int] = []
    for i, path in enumerate(files):
        name = class_of(path, class_root)
        if name is not None:
            keep.append(i)
            targets.append(mapping[name])
    return keep, targets
