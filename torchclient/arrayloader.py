"""``ArrayLoader``: fixed-shape array samples read by threads straight into reused batch tensors.

Why it exists beside :class:`~epochfs.torchclient.loader.EpochLoader`: with worker processes every
batch crosses from a worker to the training process through shared memory, one pickled tensor per
sample, so a node tops out near one core's memcpy and pays a process per ~1 GB/s. For fixed-shape
arrays none of that is needed: reading is I/O, and I/O releases the GIL. Here a pool of threads in the
training process reads each sample with one ``os.preadv`` (:mod:`.arrays`) into its row of a batch
tensor allocated once (pinned when CUDA is available), several batches ahead, in a small ring of
buffers reused for the whole run: in steady state nothing is allocated, nothing is pickled, no
per-sample tensor exists and the bytes are copied once, by the kernel, from the page cache.

The epoch semantics are EpochLoader's, from the same code: ``epoch-N`` is looked up (and so cut)
when the iteration starts (:class:`~epochfs.torchclient.dataset.EpochDataset` waits for it and reads
its manifest), the order and rank split are ``EpochSampler``'s, batch counts are made equal across
ranks by the same rule (:mod:`.epochplan`), each epoch is measured as an ``EpochStats`` and reported
to the sidecar (:mod:`.report`), the running epoch's folder is held open to its last batch, and a
listed file that is briefly unreachable (a FUSE server restart) is read again for up to
``retry_seconds`` (:mod:`.retry`).

**How long a yielded batch stays valid.** A host batch (``device`` None or "cpu") is a view of a ring
buffer: it is valid until the next batch is asked for (the next ``next()`` on the epoch's iterator,
or the end of the loop); then its buffer is refilled. Keep it longer, or hand it to an asynchronous
copy of your own, only with ``copy=True`` (each batch read into fresh memory of its own) or after
``batch.clone()``. With a CUDA ``device`` the loader copies each batch on a side stream into a fresh
device tensor that stays valid as long as you hold it; the host buffer is reused only after that
copy has finished.
"""

from __future__ import annotations

import concurrent.futures as cf
import functools
import os
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import torch

from .arraydtype import loader_dtype, note_bits, torch_dtype
from .arrays import FORMATS, ArraySampleError, SampleReader, expected_spec, make_reader
from .dataset import EpochDataset
from .decode import check_max_bytes
from .epochplan import Balance, Partition, resolve_split
from .globs import KeyFilter
from .groupwait import CutWait
from .lost import lost_aware, lost_error
from .peers import plan_epoch
from .report import ClientReporter, report_url_from_env
from .resume import OnResumeMismatch, Resumable
from .retry import RETRY_SECONDS, check_retry_seconds, retrying, transient
from .run import ArrayEpochRun, EpochStats, RunningEpoch
from .sampler import check_int, check_seed
from .waiting import Progress, check_progress, check_timeout, print_progress

T = TypeVar("T")


def default_num_threads(local_size: int = 1) -> int:
    """Reader threads per rank: two per CPU of this node shared by its ranks (reads wait on I/O), 2-16."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(2, min(16, 2 * cpus // max(local_size, 1)))


@dataclass
class _Buffer:
    """A batch tensor and its bytes; ``copied`` is the CUDA event of the last copy out of it."""

    tensor: torch.Tensor
    view: memoryview
    copied: Any = None


@dataclass
class _Batch:
    number: int
    buffer: _Buffer
    futures: list[cf.Future[None]]
    device_tensor: torch.Tensor | None = None
    rows: int = 0


def _read_rows(reader: SampleReader, paths: list[str], indices: list[int], view: memoryview, row_bytes: int,
               first_row: int, wait_for: Any, retry_seconds: float) -> None:
    """Read the samples ``indices`` into rows ``first_row``... of a buffer (runs on a reader thread)."""
    if wait_for is not None:  # the buffer's previous batch may still be on its way to the GPU
        wait_for.synchronize()
    scratch = bytearray(reader.scratch_bytes)
    offset = first_row * row_bytes
    for index in indices:
        row = view[offset:offset + row_bytes]
        try:
            reader.read_into(paths[index], row, scratch)
        except ArraySampleError as exc:
            _read_failed(paths[index], exc, functools.partial(reader.read_into, paths[index], row, scratch),
                         retry_seconds)
        offset += row_bytes


def _read_failed(path: str, exc: ArraySampleError, again: Callable[[], T], seconds: float) -> T:
    """After ``exc``, a failed read of the listed file ``path``: a lost sample's clear EIO at once
    (never retried), else ``again()`` retried when ``exc`` is what a restarting mount gives, else
    ``exc``. The one rule for every read of a sample, the first file's probe (:meth:`ArrayLoader._prepare`)
    as each row's."""
    lost = lost_error(path, exc)
    if lost is not None:
        raise lost from exc
    if seconds <= 0 or not transient(exc):
        raise exc
    return _read_again(path, again, seconds)


def _read_again(path: str, again: Callable[[], T], seconds: float) -> T:
    """A listed file that was unreachable as during a mount's restart: tried again (:mod:`.retry`)."""
    try:
        return retrying(f"sample {path}", lost_aware(path, again), seconds=seconds)
    except ArraySampleError as exc:
        if not transient(exc):
            raise
        lost = lost_error(path, exc, final=True)
        if lost is not None:
            raise lost from exc
        raise ArraySampleError(f"{exc} (tried for {seconds:g}s; was its epoch retired while nothing held it "
                               "open, or is the mount gone?)", path) from exc


class ArrayLoader(Resumable):
    """Batches of fixed-shape arrays of epoch n of the mount at ``root``, read by threads into reused tensors.

    ``for batch in loader.epoch(n)`` yields tensors of shape ``(batch_size, *shape)`` (the last one
    shorter unless ``drop_last``). Samples: ``format="npy"``, ``"npz"`` (the stored member ``member``,
    or the only one), ``"raw"`` (``dtype`` and ``shape`` required) or ``"auto"`` (by the first file's
    extension); ``dtype`` is numpy's or torch's (:mod:`.arraydtype`: ``torch.bfloat16`` is read as
    its ``uint16`` bits). ``dtype``/``shape`` not given come from the epoch's first file; every sample must
    match, else :class:`~epochfs.torchclient.arrays.ArraySampleError` names the file. The first file's
    header is parsed strictly, and the array it declares must fit in the file (and be at most
    ``max_array_bytes`` when given: the file's own size bounds it otherwise, and a sample of a
    few GiB is legitimate here), checked before any buffer is allocated; a
    header that fails is a :class:`~epochfs.torchclient.npyheader.NpyHeaderError` (an
    ``ArraySampleError``) naming the file, the field and the value.

    ``num_threads`` threads read ``prefetch`` batches ahead into a ring of ``prefetch + 1`` buffers
    (pinned when ``pin_memory``, default: CUDA available; True without CUDA is refused here, as
    ``device="cuda"`` is). A host batch is valid until the next one is
    asked for; ``copy=True`` reads each batch into memory of its own instead. ``device="cuda:N"``
    copies each batch on a side stream into a fresh device tensor (non-blocking, ordered before your
    next kernel on the current stream). Split, balance, waiting, reporting, holding the running epoch
    and ``retry_seconds`` are EpochLoader's, and so are ``state_dict()``/``load_state_dict()``,
    ``on_resume_mismatch``, ``next_epoch`` (:mod:`.resume`) and ``include``/``exclude`` (the
    files of each epoch chosen by globs, as in :class:`EpochDataset`: ``include="*.npy"`` over a
    folder that also holds images). ``dtype``/``shape`` not given come from the first file kept.
    """

    def __init__(self, root: str | os.PathLike[str], *, batch_size: int, num_threads: int | None = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False,
                 device: str | torch.device | None = None, format: str = "auto", member: str | None = None,
                 dtype: Any = None, shape: Any = None, copy: bool = False, prefetch: int = 2,
                 pin_memory: bool | None = None, partition: Partition = "node", balance: Balance = "pad",
                 num_replicas: int | None = None, rank: int | None = None, wait: bool = True,
                 timeout: float = 600.0, progress: Progress | None = print_progress,
                 on_epoch_end: Callable[[EpochStats], None] | None = None, report: bool = True,
                 retry_seconds: float = RETRY_SECONDS,
                 on_resume_mismatch: OnResumeMismatch = "raise",
                 max_array_bytes: int | None = None, include: str | Sequence[str] | None = None,
                 exclude: str | Sequence[str] | None = None) -> None:
        self.batch_size = check_int("batch_size", batch_size, 1)
        keys = KeyFilter(include, exclude)
        self.include, self.exclude = keys.include, keys.exclude
        self.max_array_bytes = check_max_bytes(max_array_bytes)
        self.prefetch = check_int("prefetch", prefetch, 1)
        self.seed = check_seed(seed)
        if balance not in ("pad", "truncate", "none"):
            raise ValueError(f"balance must be 'pad', 'truncate' or 'none', got {balance!r}")
        if format not in FORMATS:
            raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {format!r}")
        timeout = check_timeout(timeout)
        check_progress(progress)
        if on_epoch_end is not None and not callable(on_epoch_end):
            raise ValueError(f"on_epoch_end must be callable or None, got {on_epoch_end!r}")
        self.retry_seconds = check_retry_seconds(retry_seconds)
        self._init_resume(on_resume_mismatch)
        read_as, self.bits_dtype = loader_dtype(dtype)
        """The torch dtype read as its bits (``torch.bfloat16`` as uint16), None for any other."""
        self.dtype, self.shape = expected_spec(read_as, shape)
        if format == "raw" and (self.dtype is None or self.shape is None):
            raise ValueError("format='raw' needs dtype= and shape=")
        self.num_replicas, self.rank, world = resolve_split(partition, num_replicas, rank, who="ArrayLoader")
        self.world = world
        self.num_threads = default_num_threads(world.local_size) if num_threads is None else \
            check_int("num_threads", num_threads, 1)
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        if self.device.type not in ("cpu", "cuda"):
            raise ValueError(f"device must be None, 'cpu' or a CUDA device, got {device!r}")
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"device={device!r} but CUDA is not available here")
        if pin_memory and not torch.cuda.is_available():  # refused now, as device="cuda" is: not at epoch 0
            raise ValueError("pin_memory=True but CUDA is not available here (pinned memory is for copies "
                             "to a CUDA device); leave pin_memory=None (pinned when CUDA is available) or "
                             "pass False")
        self.pin_memory = torch.cuda.is_available() if pin_memory is None else bool(pin_memory)
        self.root = Path(root)
        self.shuffle, self.drop_last, self.copy = bool(shuffle), bool(drop_last), bool(copy)
        self.format, self.member = format, member
        self.partition, self.balance = partition, balance
        self.wait, self.timeout = bool(wait), timeout
        # One progress line per node is enough: the node's ranks all wait for the same cut.
        self.progress = None if progress is print_progress and world.local_rank != 0 else progress
        self._cut_wait = CutWait(who="ArrayLoader", speak=world.local_rank == 0 and self.wait)
        self._cut_wait.seconds(timeout)  # says now, at the start, when the process group lowers the wait
        self.on_epoch_end = on_epoch_end
        self.history: list[EpochStats] = []
        url = report_url_from_env()  # also with report=False: the cut requests use it (ValueError now)
        self.reporter = ClientReporter(url=url if report else None, root=self.root)
        self.reader: SampleReader | None = None
        self._tensor_dtype: torch.dtype | None = None
        self._ring: list[_Buffer] = []
        self._pool: cf.ThreadPoolExecutor | None = None
        self._stream: Any = None
        self._running = RunningEpoch()

    # ------------------------------------------------------------------ the epoch
    def epoch(self, epoch: int, *, jump: bool = False) -> ArrayEpochRun:
        """An iterable of the batches of epoch ``epoch``; the epoch is looked up when iteration starts.
        ``jump=True``: its cut may skip numbers (a resumed trainer's first epoch), as in EpochLoader."""
        return ArrayEpochRun(self, check_int("epoch", epoch, 0), jump=jump, resume=self._resume,
                             running=self._running, start_reads=self._start_reads)

    def plan(self, epoch: int, *, jump: bool = False) -> tuple[EpochDataset, list[list[int]], int]:
        """Look up ``epoch`` (waiting for its cut) and compute this rank's batches of file indices.

        Collective when torch.distributed is initialised (every rank must call it for the same epoch).
        """
        def open_epoch(timeout: float) -> EpochDataset:
            return EpochDataset(self.root, epoch, decode="bytes", wait=self.wait, timeout=timeout,
                                progress=self.progress, retry_seconds=self.retry_seconds, jump=jump,
                                include=self.include, exclude=self.exclude)

        return plan_epoch(self, epoch, lambda: self._cut_wait.run(self.timeout, open_epoch))

    def _prepare(self, dataset: EpochDataset) -> SampleReader:
        """The reader (its template from the first epoch's first file), the threads, the ring."""
        if self.reader is None:
            first = str(dataset.path(0))
            probe = functools.partial(make_reader, self.format, first, member=self.member, dtype=self.dtype,
                                      shape=self.shape, max_array_bytes=self.max_array_bytes)
            try:
                try:
                    reader = probe()
                except ArraySampleError as exc:  # read as every sample is: retried, or lost at once
                    reader = _read_failed(first, exc, probe, self.retry_seconds)
            except ArraySampleError as exc:
                note_bits(exc, self.bits_dtype)
                raise
            self._tensor_dtype = self.bits_dtype or torch_dtype(reader.spec.dtype, first)
            self.reader = reader
        if self._pool is None:
            self._pool = cf.ThreadPoolExecutor(self.num_threads, thread_name_prefix="epochfs-array")
        if not self.copy and not self._ring:
            self._ring = [self._new_buffer() for _ in range(self.prefetch + 1)]
        if self.device.type == "cuda" and self._stream is None:
            self._stream = torch.cuda.Stream(self.device)
        return self.reader

    def _start_reads(self, dataset: EpochDataset, batches: list[list[int]]) -> _Pipeline:
        """Start reading ``batches`` (of ``dataset``'s file indices) on the threads, into the ring."""
        reader = self._prepare(dataset)
        assert self._pool is not None
        base = str(dataset.dir) + os.sep
        return _Pipeline(self, reader, [base + f for f in dataset.files], batches, pool=self._pool,
                         ring=self._ring, new_buffer=self._new_buffer, stream=self._stream)

    def _new_buffer(self) -> _Buffer:
        assert self.reader is not None and self._tensor_dtype is not None
        tensor = torch.empty((self.batch_size, *self.reader.spec.shape), dtype=self._tensor_dtype,
                             pin_memory=self.pin_memory)
        flat: Any = tensor.view(-1).view(torch.uint8).numpy()  # the tensor's own memory, as bytes
        return _Buffer(tensor, memoryview(flat))

    @property
    def ring(self) -> list[torch.Tensor]:
        """The reused batch tensors (empty before the first epoch and with ``copy=True``)."""
        return [buffer.tensor for buffer in self._ring]

    def close(self) -> None:
        """Stop an unfinished epoch, the reader threads and the reporter (a later epoch starts them again)."""
        self._running.close()
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        self.reporter.close()

    def __enter__(self) -> ArrayLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class _Pipeline:
    """The batches of one epoch in flight: at most ``prefetch + 1`` buffers being filled or held.

    Given what it reads with (the threads, the ring, a maker of fresh buffers for ``copy=True``,
    the CUDA side stream); of the loader it reads only the public settings."""

    loader: ArrayLoader
    reader: SampleReader
    paths: list[str]
    batches: list[list[int]]
    pool: cf.ThreadPoolExecutor
    ring: list[_Buffer]
    new_buffer: Callable[[], _Buffer]
    stream: Any
    free: deque[_Buffer] = field(default_factory=deque)
    pending: deque[_Batch] = field(default_factory=deque)
    held: _Buffer | None = None
    submitted: int = 0

    def __post_init__(self) -> None:
        self.free.extend(self.ring)
        self.chunk = max(1, -(-self.loader.batch_size // (2 * self.loader.num_threads)))

    def _submit(self) -> None:
        """Start reading batches into free buffers (fresh ones with ``copy=True``), in order."""
        loader, pool = self.loader, self.pool
        while self.submitted < len(self.batches) and len(self.pending) <= loader.prefetch:
            if loader.copy:
                buffer = self.new_buffer()
            elif self.free:
                buffer = self.free.popleft()
            else:
                break
            indices = self.batches[self.submitted]
            row_bytes = self.reader.spec.nbytes
            futures = [pool.submit(_read_rows, self.reader, self.paths, indices[start:start + self.chunk],
                                   buffer.view, row_bytes, start, buffer.copied, loader.retry_seconds)
                       for start in range(0, len(indices), self.chunk)]
            self.pending.append(_Batch(self.submitted, buffer, futures, rows=len(indices)))
            self.submitted += 1

    def next(self) -> torch.Tensor:
        """The next batch: release the one held, top up the reads, wait for the head batch."""
        if self.held is not None and not self.loader.copy:
            self.free.append(self.held)
        self.held = None
        self._submit()
        batch = self.pending.popleft()
        cf.wait(batch.futures)
        for future in batch.futures:
            if (failed := future.exception()) is not None:  # the first failing sample's, naming the file
                note_bits(failed, self.loader.bits_dtype)
                raise failed
        self.held = batch.buffer
        host = batch.buffer.tensor
        if batch.rows < self.loader.batch_size:
            host = host[:batch.rows]
        if self.loader.device.type != "cuda":
            return host
        self._copy_ahead(batch, host)
        for ahead in self.pending:  # start the copies of batches already read: they overlap compute
            if ahead.device_tensor is not None or not all(f.done() for f in ahead.futures):
                break
            if any(f.exception() is not None for f in ahead.futures):
                break
            self._copy_ahead(ahead, ahead.buffer.tensor[:ahead.rows])
        out = batch.device_tensor
        assert out is not None
        current = torch.cuda.current_stream(self.loader.device)
        current.wait_event(batch.buffer.copied)
        out.record_stream(current)
        return out

    def _copy_ahead(self, batch: _Batch, host: torch.Tensor) -> None:
        """Copy a read batch to the device on the side stream; its buffer waits for the copy's event."""
        if batch.device_tensor is not None:
            return
        stream = self.stream
        with torch.cuda.stream(stream):
            out = torch.empty(host.shape, dtype=host.dtype, device=self.loader.device)
            out.copy_(host, non_blocking=True)
            event = torch.cuda.Event()
            event.record(stream)
        batch.device_tensor = out
        batch.buffer.copied = event

    def close(self) -> None:
        """Cancel reads not started and wait for running ones: their buffers go back to the ring."""
        for batch in self.pending:
            for future in batch.futures:
                future.cancel()
        for batch in self.pending:
            cf.wait(batch.futures)
            self.free.append(batch.buffer)
        self.pending.clear()
