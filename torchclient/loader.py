"""``EpochLoader``: one persistent DataLoader over growing epochs, with a free epoch boundary.

How the boundary is made free: the DataLoader is built once, over a dataset that decodes a *path*
(``epoch-N/<relative path>``), with persistent worker processes. Its batch sampler is a plan the
training process fills at each boundary with the paths of the current epoch. So ``epoch(n + 1)``:

1. looks up ``root/epoch-<n+1>`` only when its iteration starts (as late as possible, so the cut holds
   every sample the sidecar fetched during epoch n), waiting for the cut if needed;
2. reads the manifest in the training process (one small file, no directory walk);
3. splits it over the ranks of the node (``EpochSampler`` semantics) and, when torch.distributed is
   initialised, makes the number of batches equal across the world (one all_reduce), by the rule in
   :mod:`.epochplan` that :class:`~epochfs.torchclient.arrayloader.ArrayLoader` follows too;
4. hands the plan to the same worker processes, which start decoding at once: no process start, no
   dataset pickling, at the boundary.

The loader measures each epoch (samples, bytes, seconds, seconds the training process waited for
data) as an :class:`EpochStats`, kept in ``history`` and passed to ``on_epoch_end``; with
``report=True`` (default) it also posts those increments to the sidecar on the pod's loopback
(:mod:`epochfs.torchclient.report`), from a thread, never in the way of training.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from .collate import collate
from .dataset import EpochDataset
from .decode import MAX_ARRAY_BYTES, Decoder, check_max_bytes, load_sample, resolve_decoder
from .epochplan import Balance, Partition, resolve_split
from .globs import KeyFilter
from .groupwait import CutWait
from .labels import check_class_root, check_classes
from .layout import epoch_name
from .peers import plan_epoch
from .report import ClientReporter, report_url_from_env
from .resume import OnResumeMismatch, Resumable
from .retry import RETRY_SECONDS, check_retry_seconds
from .run import EpochRun, EpochStats, RunningEpoch
from .sampler import check_seed
from .waiting import Progress, check_epoch, check_progress, check_timeout, print_progress
from .workers import end_after_a_death, worker_failure

_RESERVED_KWARGS = ("dataset", "batch_size", "shuffle", "sampler", "batch_sampler", "drop_last")


class _PathDataset(Dataset[Any]):
    """Decodes ``root/<relative path>``; the index *is* the path, so it never changes across epochs.

    Paths come from the epoch's manifest, so a briefly unreachable one (a FUSE server restart) is
    retried for up to ``retry_seconds``."""

    def __init__(self, root: str, decoder: Decoder, transform: Callable[[Any], Any] | None,
                 retry_seconds: float = RETRY_SECONDS) -> None:
        self.root = root
        self.decoder = decoder
        self.transform = transform
        self.retry_seconds = retry_seconds

    def __getitem__(self, item: str | tuple[str, int]) -> Any:
        """``item``: a relative path, or (relative path, label) with ``label="folder"`` (the label
        travels with the path, so the workers need no class map of their own)."""
        if isinstance(item, tuple):
            relative, target = item
            return load_sample(os.path.join(self.root, relative), self.decoder, self.transform,
                               retry_seconds=self.retry_seconds), target
        return load_sample(os.path.join(self.root, item), self.decoder, self.transform,
                           retry_seconds=self.retry_seconds)


class _PlanSampler(Sampler[list[Any]]):
    """The batch sampler the persistent DataLoader iterates: the current epoch's batches of paths."""

    def __init__(self) -> None:
        self.batches: list[list[Any]] = []

    def __iter__(self) -> Iterator[list[Any]]:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


class _Workers:
    """The one persistent DataLoader of an :class:`EpochLoader` and the plan it iterates, handed to
    each of its runs (:class:`~.run.Workers`). Kept across epochs, so the worker processes are too;
    made again (by ``build``, from the loader's settings) after :meth:`close`."""

    def __init__(self, build: Callable[[_PlanSampler], DataLoader[Any]]) -> None:
        self._build = build
        self._plan = _PlanSampler()
        self._loader: DataLoader[Any] | None = None

    def dataloader(self) -> DataLoader[Any]:
        """The one DataLoader (worker processes start at its first iteration, not here)."""
        if self._loader is None:
            self._loader = self._build(self._plan)
        return self._loader

    def serve(self, batches: list[list[Any]]) -> DataLoader[Any]:
        """The DataLoader, its next iteration planned to load ``batches``; a fresh one when a worker
        of the last died. A worker killed while the training step runs (out of memory) fails that
        epoch from torch's SIGCHLD handler, in the training code, not in the run: only this check
        sees it, and a DataLoader with a dead worker never serves again."""
        if self._a_worker_died():
            self.close()
        dataloader = self.dataloader()
        self._plan.batches = batches
        return dataloader

    def serving(self, dataloader: Iterable[Any]) -> bool:
        """Whether ``dataloader`` is still this one's DataLoader (not closed since :meth:`serve`)."""
        return self._loader is dataloader

    def _a_worker_died(self) -> bool:
        return any(not process.is_alive() for process in self.processes())

    def processes(self) -> list[Any]:
        """The DataLoader's worker processes once its first iteration started them ([] before, after
        :meth:`close`, and with ``num_workers=0``). Private DataLoader state, read only: torch has no
        public way to them."""
        iterator = getattr(self._loader, "_iterator", None)
        return list(getattr(iterator, "_workers", []))

    def failure(self, exc: Exception) -> Exception | None:
        """The error to raise when a worker of the DataLoader died (None while all live), see
        :func:`worker_failure`."""
        return worker_failure(exc, self.processes())

    def close(self) -> None:
        """Shut the worker processes down; the next epoch builds a DataLoader over a fresh plan.
        After a worker's death torch's own shutdown could wait for ever (:func:`end_after_a_death`)."""
        died = self._a_worker_died()
        dataloader, self._loader = self._loader, None
        if dataloader is not None:
            iterator = getattr(dataloader, "_iterator", None)
            if died:
                end_after_a_death(iterator)
            else:
                shutdown = getattr(iterator, "_shutdown_workers", None)
                if shutdown is not None:
                    shutdown()
            dataloader._iterator = None
        self._plan = _PlanSampler()


def default_num_workers(local_size: int = 1) -> int:
    """Worker processes per rank: the CPUs of this node shared by its ranks, one left for training; 1-8."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(8, cpus // max(local_size, 1) - 1))


HIDDEN_FILES = (".*", "**/.*/**")
"""``exclude`` globs of hidden files and of everything in hidden folders, at any depth: what
``decode="image"`` leaves out by default (never an image a user put there)."""


class EpochLoader(Resumable):
    """Batches of epoch n of the mount at ``root``, one persistent DataLoader for all epochs.

    ``for batch in loader.epoch(n)`` looks up ``epoch-n`` when the iteration starts (waiting for its
    cut), splits it over the ranks of this node (``partition="node"``, the default, since each node's
    sidecar samples its own shard; ``"global"`` splits over every rank, for schedule mode with the same
    shard on every node) with ``EpochSampler`` semantics (shuffled with ``seed + n``), and, when
    torch.distributed is initialised, equalises the batch count across the world: ``balance="pad"``
    (default) repeats this rank's own samples of the epoch, from the start of its shuffled list, up to
    the largest count; ``"truncate"`` drops this rank's last batches down to the smallest count.

    Worker processes decode (``decode``/``transform`` as in :class:`EpochDataset`); defaults: a few
    workers per rank (:func:`default_num_workers`), ``persistent_workers``, ``prefetch_factor=4``,
    ``pin_memory`` when CUDA is available. Other keyword arguments go to ``torch.utils.data.DataLoader``.

    The training process holds the running epoch's folder open from its lookup to its last batch
    (also while training pauses between batches: a checkpoint, a validation pass), so the sidecar
    keeps it whole; a listed file that is briefly unreachable (a FUSE server restart) is retried for
    up to ``retry_seconds`` (default 30; 0: never), one warning line per incident.

    ``max_array_bytes`` (default 2 GiB; None: no limit) bounds what one ``.npz`` member may inflate
    to with ``decode="npz"`` or ``"auto"`` (checked from the zip's recorded size and while inflating;
    each member's ``.npy`` header is parsed strictly and must fit in the member). A sample's dict
    raises :class:`~epochfs.torchclient.npyheader.NpzMemberError` (a KeyError) naming the file and
    its arrays for a name it lacks.

    ``state_dict()``/``load_state_dict()`` save and restore the position in an epoch (:mod:`.resume`);
    ``on_resume_mismatch`` says what a resume does when its epoch is gone or differs ("raise" or
    "restart"); ``next_epoch`` is the epoch to iterate next.

    ``include``/``exclude`` choose the files of every epoch as in :class:`EpochDataset` (globs over
    the path inside ``epoch-N/``, the sidecar's ``--include``/``--exclude`` rule; checked here, up
    front): a cache shared by readers of different files, or one filled before the sidecar was told.
    With ``decode="image"`` and neither ``include`` nor ``exclude``, hidden files and folders are
    left out (:data:`HIDDEN_FILES`: a ``.DS_Store``, macOS's ``._*``, ``.ipynb_checkpoints/``,
    common in buckets uploaded from a laptop, which would fail the epoch at their decode) and every
    other file is decoded, whatever its name: an image key without an extension, a GIF (not by
    extension, as :class:`~epochfs.torchclient.imagefolder.EpochImageFolder`'s ImageFolder rule
    takes them, which would drop such images without a word).

    ``label="folder"`` (with ``class_root``, ``classes``) makes each sample ``(sample, class
    index)`` as in :class:`EpochDataset`: the class folder's index in the mount's
    ``.epochfs/classes.json``, the same in every epoch. Batches are made by
    :func:`~epochfs.torchclient.collate.collate` unless ``collate_fn`` is given: torch's
    ``default_collate``, with samples of different shapes reported as a ``BatchShapeError`` that
    names the fix (a resizing ``transform`` or a ``collate_fn``).
    """

    def __init__(self, root: str | os.PathLike[str], *, batch_size: int, num_workers: int | None = None,
                 decode: str | Decoder = "auto", transform: Callable[[Any], Any] | None = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False, partition: Partition = "node",
                 balance: Balance = "pad", num_replicas: int | None = None, rank: int | None = None,
                 wait: bool = True, timeout: float = 600.0, progress: Progress | None = print_progress,
                 on_epoch_end: Callable[[EpochStats], None] | None = None, report: bool = True,
                 retry_seconds: float = RETRY_SECONDS, on_resume_mismatch: OnResumeMismatch = "raise",
                 max_array_bytes: int | None = MAX_ARRAY_BYTES, include: str | Sequence[str] | None = None,
                 exclude: str | Sequence[str] | None = None, label: str | None = None,
                 class_root: str = ".", classes: Mapping[str, int] | Sequence[str] | None = None,
                 **dataloader_kwargs: Any) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
        if balance not in ("pad", "truncate", "none"):
            raise ValueError(f"balance must be 'pad', 'truncate' or 'none', got {balance!r}")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {seed!r}")
        if transform is not None and not callable(transform):
            raise ValueError(f"transform must be callable or None, got {transform!r}")
        if on_epoch_end is not None and not callable(on_epoch_end):
            raise ValueError(f"on_epoch_end must be callable or None, got {on_epoch_end!r}")
        timeout = check_timeout(timeout)
        check_progress(progress)
        clash = sorted(set(dataloader_kwargs) & set(_RESERVED_KWARGS))
        if clash:
            raise TypeError(f"EpochLoader sets {', '.join(clash)} itself (the epoch plan is its sampler); "
                            "use batch_size=, shuffle=, drop_last= of EpochLoader")
        if include is None and exclude is None and isinstance(decode, str) and decode == "image":
            exclude = list(HIDDEN_FILES)  # a .DS_Store would fail the epoch's decode
        keys = KeyFilter(include, exclude)
        if label not in (None, "folder"):
            raise ValueError(f"label must be None or 'folder' (the class folder's index), got {label!r}")
        self.label = label
        self.class_root = check_class_root(class_root)
        self.classes = None if classes is None else check_classes(classes)
        num_replicas, rank, world = resolve_split(partition, num_replicas, rank, who="EpochLoader")
        self.world = world
        if num_workers is None:
            num_workers = default_num_workers(world.local_size)
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError(f"num_workers must be an int >= 0, got {num_workers!r}")
        self.retry_seconds = check_retry_seconds(retry_seconds)
        self._init_resume(on_resume_mismatch)
        self.root = Path(root)
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.max_array_bytes = check_max_bytes(max_array_bytes)
        self.decoder = resolve_decoder(decode, max_array_bytes=self.max_array_bytes)
        self.transform = transform
        self.include, self.exclude = keys.include, keys.exclude
        self.shuffle = bool(shuffle)
        self.seed = check_seed(seed)
        self.drop_last = bool(drop_last)
        self.partition = partition
        self.balance = balance
        self.num_replicas = num_replicas
        self.rank = rank
        self.wait = bool(wait)
        self.timeout = timeout
        # One progress line per node is enough: the node's ranks all wait for the same cut.
        self.progress = None if progress is print_progress and world.local_rank != 0 else progress
        self._cut_wait = CutWait(who="EpochLoader", speak=world.local_rank == 0 and self.wait)
        self._cut_wait.seconds(timeout)  # says now, at the start, when the process group lowers the wait
        self.on_epoch_end = on_epoch_end
        options: dict[str, Any] = {"pin_memory": torch.cuda.is_available(), "collate_fn": collate}
        if num_workers > 0:
            options.update(persistent_workers=True, prefetch_factor=4)
        options.update(dataloader_kwargs)
        self.dataloader_options = options
        self.history: list[EpochStats] = []
        url = report_url_from_env()  # also with report=False: the cut requests use it (ValueError now)
        self.reporter = ClientReporter(url=url if report else None, root=self.root)
        self._workers = _Workers(self._new_dataloader)
        self._running = RunningEpoch()
        # Building the DataLoader now validates its options up front (workers start at the first epoch).
        self._workers.dataloader()

    def _new_dataloader(self, plan: _PlanSampler) -> DataLoader[Any]:
        """A DataLoader over this loader's settings, iterating ``plan`` (no worker started yet)."""
        dataset = _PathDataset(str(self.root), self.decoder, self.transform, self.retry_seconds)
        return DataLoader(dataset, batch_sampler=plan, num_workers=self.num_workers,
                          **self.dataloader_options)

    def worker_pids(self) -> list[int]:
        """The process ids of this loader's worker processes: [] until the first epoch starts them,
        after :meth:`close`, and with ``num_workers=0``; the same ids every epoch in between (they
        persist). For tests and benchmarks: which processes decode, and the CPU time they spend."""
        return [int(w.pid) for w in self._workers.processes()]

    def epoch(self, epoch: int, *, jump: bool = False) -> EpochRun:
        """An iterable of the batches of epoch ``epoch``; the epoch is looked up when iteration starts.

        ``jump=True``: a cut may skip numbers to reach it (a resumed trainer's first epoch, above the
        sidecar's newest + 1); otherwise only the next epoch is cut, as for a lookup."""
        return EpochRun(self, check_epoch(epoch), jump=jump, resume=self._resume, running=self._running,
                        workers=self._workers)

    def plan(self, epoch: int, *, jump: bool = False) -> tuple[EpochDataset, list[list[Any]], list[int], int]:
        """Look up ``epoch`` and compute this rank's batches of paths, their byte sizes and the padding.

        Collective when torch.distributed is initialised (every rank must call it for the same epoch).
        """
        def open_epoch(timeout: float) -> EpochDataset:
            return EpochDataset(self.root, epoch, decode=self.decoder, wait=self.wait, timeout=timeout,
                                progress=self.progress, retry_seconds=self.retry_seconds, jump=jump,
                                include=self.include, exclude=self.exclude, label=self.label,
                                class_root=self.class_root, classes=self.classes)

        dataset, plan, padded = plan_epoch(self, epoch, lambda: self._cut_wait.run(self.timeout, open_epoch))
        prefix = epoch_name(epoch) + "/"
        targets = dataset.targets
        batches: list[list[Any]] = (
            [[prefix + dataset.files[i] for i in chunk] for chunk in plan] if targets is None
            else [[(prefix + dataset.files[i], targets[i]) for i in chunk] for chunk in plan])
        sizes = [sum(dataset.sizes[i] for i in chunk) for chunk in plan]
        return dataset, batches, sizes, padded

    def close(self) -> None:
        """Stop an unfinished epoch (recorded incomplete, its loop ends: a state saved after resumes
        it), then the worker processes (also done when the loader is garbage-collected). The workers
        before the reporter: while they are registered, torch's SIGCHLD handler raises wherever the
        main thread is when one of them dies (here, the reporter's join)."""
        self._running.close()
        self._workers.close()
        self.reporter.close()

    def __enter__(self) -> EpochLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
