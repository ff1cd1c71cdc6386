"""Labels by class folder (``train/<class>/<file>``) that stay the same in every epoch.

torchvision's ``ImageFolder`` numbers the classes of a folder by the class folders it finds there,
sorted: over ``epoch-N/train`` an epoch that lacks one class shifts every later label by one,
silently. The sidecar keeps one list of folders per cache that only grows and publishes each
folder's index in ``.epochfs/classes.json`` (:mod:`.layout`); this module reads it:

* :func:`class_map` gives ``{class name: index}`` for a class root (``"train"``; ``"."`` the
  epoch's own folder), from ``classes.json`` where the mount has it. Without it (a plain folder
  shaped like the mount), from the class folders of every visible epoch up to this one, sorted,
  with a warning: those are stable only while no later epoch brings a class that sorts earlier.
  There a class is a folder holding at least one file the dataset reads (its ``include`` and
  ``exclude``), in every epoch alike, so identical epochs give identical maps. A hidden folder
  (:func:`is_hidden`) is no class there nor in ``classes.json``.
* :func:`label_files` keeps the files inside a class folder of the root and gives each its label.

A class folder that ``classes.json`` lacks (it can only have been read before the epoch's folders
were recorded) is read again once; a class still missing is a :class:`ClassMapError` naming it.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from .epochwalk import walk_epoch
from .layout import ROOT_KEY, list_epochs, read_classes, read_manifest


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


def is_hidden(name: str) -> bool:
    """Whether a folder is hidden, and so no class (``.ipynb_checkpoints``, ``.git``): tooling
    beside the data. The sidecar records no hidden folder in ``classes.json``
    (``epochfs.sidecar.store.classes.hidden_folder``, which this package may not import:
    tests/torchclient/test_hidden_class_folders.py checks both agree), so a plain folder and the
    mount number the same classes."""
    return name.startswith(".")


def class_of(path: str, class_root: str) -> str | None:
    """The class folder of ``path`` under ``class_root`` (None: not inside one of its folders, or
    inside a hidden one, :func:`is_hidden`)."""
    prefix = _prefix(class_root)
    if not path.startswith(prefix):
        return None
    name, sep, _ = path[len(prefix):].partition("/")
    return name if sep and name and not is_hidden(name) else None


def check_classes(classes: Mapping[str, int] | Sequence[str]) -> dict[str, int]:
    """A ``classes=`` argument as ``{name: index}``: a mapping as it is, a list of names by index.
    The indexes must be 0..K-1, each once (ClassMapError naming those that are not): ``classes``
    lists the names by index and ``len(classes)`` sizes a model's output."""
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
    problem = _not_dense(mapping)
    if problem:
        raise ClassMapError(f"classes: the indexes of {len(mapping)} classes must be 0..{len(mapping) - 1}, "
                            f"each once ({problem}): classes[label] names the class of a label and "
                            "len(classes) sizes the model's output, neither of which holds otherwise; "
                            "number the classes 0..K-1 (e.g. {name: i for i, name in enumerate(names)})")
    return mapping


def _not_dense(mapping: Mapping[str, int]) -> str:
    """What keeps ``mapping``'s indexes from being 0..K-1 each once ('' when nothing): the
    indexes given to several classes, those past K-1 (a gap below them)."""
    by_index: dict[int, list[str]] = {}
    for name, index in mapping.items():
        by_index.setdefault(index, []).append(name)
    said = [f"index {i} is given to {', '.join(repr(n) for n in sorted(names))}"
            for i, names in sorted(by_index.items()) if len(names) > 1]
    beyond = {i: names for i, names in sorted(by_index.items()) if i >= len(mapping)}
    if beyond:
        unused = [i for i in range(len(mapping)) if i not in by_index]
        shown = ", ".join(f"{names[0]!r}: {i}" for i, names in list(beyond.items())[:5])
        said.append(f"{shown} {'is' if len(beyond) == 1 else 'are'} past {len(mapping) - 1}, "
                    f"leaving {', '.join(map(str, unused[:5]))}{' ...' if len(unused) > 5 else ''} unused")
    return "; ".join(said)


def _class_names(paths: Iterable[str], class_root: str) -> set[str]:
    return {c for c in (class_of(p, class_root) for p in paths) if c is not None}


def _from_epochs(root: str | os.PathLike[str], epoch: int, class_root: str, files: Iterable[str],
                 keep: Callable[[str], bool] | None) -> dict[str, int]:
    """The class folders of ``files`` (this epoch's, already chosen by ``keep``) and of the visible
    epochs before it, numbered in sorted order. The earlier epochs' paths pass through ``keep`` too:
    a folder holding only files the dataset leaves out (a Jupyter ``.ipynb_checkpoints/``, a
    ``meta/`` of JSON beside the images, under an images-only ``include``) is no class in this epoch,
    so it must be none in the others, or two identical epochs number their classes differently."""
    names = _class_names(files, class_root)
    for n in list_epochs(root):
        if n >= epoch:
            continue
        manifest = read_manifest(root, n)
        paths = manifest.paths if manifest is not None else [p for p, _ in walk_epoch(root, n)]
        names |= _class_names(paths if keep is None else filter(keep, paths), class_root)
    return {name: i for i, name in enumerate(sorted(names))}


def class_map(root: str | os.PathLike[str], epoch: int, class_root: str, files: Sequence[str], *,
              classes: Mapping[str, int] | Sequence[str] | None = None,
              keep: Callable[[str], bool] | None = None) -> ClassMap:
    """The class map of ``class_root`` for ``files`` (epoch ``epoch``'s paths that the dataset reads,
    chosen by ``keep``, its include/exclude; None: every path): ``classes`` when given, else the
    mount's ``classes.json``, else the class folders of the visible epochs up to ``epoch`` (a
    warning says why that is weaker). Every class folder of ``files`` must have an index
    (ClassMapError otherwise, after one more read of ``classes.json``). A class root with no class
    folder while the epoch has files is a ClassMapError too, on a mount and a plain folder alike:
    the dataset would be empty and train for zero steps."""
    maps = read_classes(root)
    if classes is not None:
        found = ClassMap(check_classes(classes), "given")
        if maps is not None and class_root not in maps and files:  # a map given for the wrong folder
            raise ClassMapError(_not_a_class_root(root, epoch, class_root, maps))
        if (maps is None and files and not _class_names(files, class_root)
                and not _from_epochs(root, epoch, class_root, files, keep)):
            raise ClassMapError(_no_class_folder(root, epoch, class_root, files))
    elif maps is None:
        mapping = _from_epochs(root, epoch, class_root, files, keep)
        if not mapping and files:
            raise ClassMapError(_no_class_folder(root, epoch, class_root, files))
        _check_not_one(mapping, epoch, class_root, files)
        warnings.warn(f"{root} has no .epochfs/classes.json (not an epochfs mount of this version): "
                      f"the classes of {class_root!r} are numbered from the class folders of the "
                      "epochs present, which changes the labels if a later epoch brings a class that "
                      "sorts before others; pass classes= to fix them", stacklevel=3)
        return ClassMap(mapping, "epochs")
    else:
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
    if found.source != "given":
        _check_not_one(found.class_to_idx, epoch, class_root, files)
    return found


def _check_not_one(mapping: Mapping[str, int], epoch: int, class_root: str, files: Sequence[str]) -> None:
    """A class root with one class gives every file label 0: a classifier learns nothing from it,
    and it is what ``class_root="."`` (the default) gives on the ``train/<class>/`` layout, where
    ``train`` is the one folder at the top. ClassMapError naming the folder and, where it holds the
    class folders, the class_root to pass; ``classes=`` with one entry is taken as meant. An epoch
    with no file in the class (all outside it) labels nothing and passes."""
    if len(mapping) != 1 or all(class_of(path, class_root) is None for path in files):
        return
    (only,) = mapping
    inner = only if class_root == ROOT_KEY else f"{class_root}/{only}"
    below = sorted(_class_names(files, inner))
    if below:
        named = ", ".join(below[:5]) + (" ..." if len(below) > 5 else "")
        advice = (f"it holds the class folders {named}: pass class_root={inner!r} "
                  f"(EpochImageFolder's folder={inner!r})")
    else:
        advice = ("a classifier needs two classes or more: check class_root, or pass classes= naming "
                  "the one class if it is meant")
    raise ClassMapError(f"class_root={class_root!r} has one class, {only!r}, so every file of epoch {epoch} "
                        f"would get label 0; {advice}")


def _roots_named(roots: Iterable[str]) -> str:
    """The class roots that do have classes, for the message (the first eight, sorted)."""
    ordered = sorted(roots)
    named = ", ".join(repr(r) for r in ordered[:8]) + (" ..." if len(ordered) > 8 else "")
    return (f"class roots with classes: {named or 'none'} ('.' is the epoch's own folder): pass it as "
            "folder= / class_root=")


def _not_a_class_root(root: str | os.PathLike[str], epoch: int, class_root: str,
                      maps: Mapping[str, Mapping[str, int]]) -> str:
    """Why ``class_root`` has no classes although the epoch has files: the cache never held a
    folder under it (a typo, or the default ``"train"`` where the classes are at the top). An
    empty dataset would train for zero steps without a word, where torchvision's ImageFolder
    raises."""
    return (f"{class_root!r} holds no class folder in {root} (epoch {epoch} has files, and the cache has "
            f"never held a folder under {class_root!r}); "
            + _roots_named(r for r, classes in maps.items() if classes))


def _no_class_folder(root: str | os.PathLike[str], epoch: int, class_root: str, files: Sequence[str]) -> str:
    """The same for a plain folder (no ``classes.json``): no epoch up to ``epoch`` has a file the
    dataset reads inside a folder under ``class_root``. The class roots named are those of this
    epoch's files (every folder is the class root of the folders inside it, as in ``classes.json``)."""
    roots: set[str] = set()
    for path in files:
        folders = path.split("/")[:-1]
        roots.update("/".join(folders[:i]) or ROOT_KEY for i in range(len(folders)))
    return (f"{class_root!r} holds no class folder in {root} (epoch {epoch} has {len(files)} file(s) the "
            f"dataset reads, and no epoch up to it has one in a folder under {class_root!r}); "
            + _roots_named(roots))


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
