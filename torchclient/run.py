"""The run of one epoch, shared by both loaders, and what it needs of them, declared.

``loader.epoch(n)`` returns a run: an iterable that looks ``epoch-n`` up when iterated (or measured
with ``len()``), skips what a loaded state consumed, yields the epoch's batches and measures them
(:class:`EpochStats`). Why the run is given its collaborators rather than reaching for them: the
run and the loader share state (the resume position, the one running epoch, the worker processes
or the reader threads), and each piece is an object of its own, handed to the run when the loader
makes it (:class:`~.resume.ResumeTracker`, :class:`RunningEpoch`, :class:`Workers`, :data:`StartReads`);
of the loader itself a run uses only the public members in :class:`RunLoader`. So either side can
change its private parts without breaking the other, and a type checker sees every use.
"""

from __future__ import annotations

import inspect
import time
import weakref
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .describe import decimal_size
from .peers import agree_resume

if TYPE_CHECKING:
    from .dataset import EpochDataset
    from .report import ClientReporter
    from .resume import ResumeTracker


@dataclass
class EpochStats:
    """What one epoch delivered to this rank, measured in the training process."""

    epoch: int
    files: int = 0
    """Files of the epoch folder read (the node's whole epoch, before the split over ranks)."""
    excluded: int = 0
    """Files of the epoch folder left out (``include``/``exclude``, files outside a class folder):
    the line counts them apart, so "3 files" never hides an epoch of 100."""
    samples: int = 0
    """Samples delivered to this rank (repeats from padding included)."""
    batches: int = 0
    bytes: int = 0
    """File bytes of the delivered samples (from the manifest sizes)."""
    seconds: float = 0.0
    """Wall time from the first lookup of the epoch to its last batch (cut wait included)."""
    wait_seconds: float = 0.0
    """Time the training process spent waiting for the next batch (time spent training excluded)."""
    cut_wait_seconds: float = 0.0
    """Part of ``seconds`` spent waiting for the epoch folder to appear (its cut)."""
    padded: int = 0
    """Samples repeated (or, negative, dropped) to equalise batch counts across ranks."""
    complete: bool = False
    """False when the consumer stopped early (break) or an error ended the epoch."""

    @property
    def reading_seconds(self) -> float:
        """``seconds`` less the wait for the cut: the time the epoch took to read once it was there."""
        return max(0.0, self.seconds - self.cut_wait_seconds)

    @property
    def mb_per_s(self) -> float:
        """Throughput of the reading, the wait for the cut excluded (it said nothing of the data
        path: an epoch that waited 20 s for its cut read at a tenth of its real rate)."""
        return self.bytes / 1e6 / self.reading_seconds if self.reading_seconds > 0 else 0.0

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.reading_seconds if self.reading_seconds > 0 else 0.0

    def _files(self) -> str:
        if not self.excluded:
            return f"{self.files} files in the epoch"
        return f"{self.files} of the epoch's {self.files + self.excluded} files, {self.excluded} left out"

    def line(self) -> str:
        """One human line, the one the examples print; sizes and rates in the decimal unit that
        fits (a small epoch read "0.0 MB in 0.05s = 0.1 MB/s"; now "44.0 kB ... = 880.0 kB/s")."""
        rate = self.bytes / self.reading_seconds if self.reading_seconds > 0 else 0.0
        return (f"epoch {self.epoch}: {self.samples} samples in {self.batches} batches "
                f"({self._files()}), {decimal_size(self.bytes)} in "
                f"{self.reading_seconds:.2f}s = "
                f"{decimal_size(rate)}/s, {self.samples_per_s:.0f} samples/s; "
                f"waited {self.wait_seconds:.2f}s for data, {self.cut_wait_seconds:.2f}s for the cut before"
                + ("" if self.complete else " [incomplete]"))


class RunLoader(Protocol):
    """What a run uses of its loader (both loaders have it): the plan of an epoch, the reporter,
    where the stats go, and ``close`` (an EpochLoader's run closes it when a worker died)."""

    reporter: ClientReporter
    history: list[EpochStats]
    on_epoch_end: Callable[[EpochStats], None] | None

    @property
    def balance(self) -> str:
        """"pad", "truncate" or "none": whether an epoch's start is collective (not with "none")."""
        ...

    def plan(self, epoch: int, *, jump: bool = False) -> tuple[Any, ...]:
        """(dataset, batches, ...): look the epoch up and cut this rank's batches."""
        ...

    def close(self) -> None:
        """Stop the loader's workers or threads and its reporter."""
        ...


class Workers(Protocol):
    """An EpochLoader's persistent DataLoader, as its run uses it."""

    def serve(self, batches: list[list[Any]]) -> Iterable[Any]:
        """The DataLoader, now planned to load ``batches`` (started or not)."""
        ...

    def failure(self, exc: Exception) -> Exception | None:
        """The error to raise when a worker process died (None while all live)."""
        ...

    def serving(self, dataloader: Iterable[Any]) -> bool:
        """Whether ``dataloader`` (from :meth:`serve`) is still the one served (not closed since)."""
        ...


class Reads(Protocol):
    """An ArrayLoader's reads of one epoch in flight, as its run uses them."""

    def next(self) -> Any:
        """The next batch (a tensor), once read."""
        ...

    def close(self) -> None:
        """Cancel the reads not started and wait for the running ones."""
        ...


StartReads = Callable[["EpochDataset", list[list[int]]], Reads]
"""Start reading an epoch's batches (of file indices) of a dataset: an ArrayLoader's threads and ring."""


class RunningEpoch:
    """The epoch a loader is iterating, held weakly: a loop that breaks drops its generator (and
    records its stats) at once. A loader's workers or ring serve one epoch at a time, so starting
    another closes an unfinished one first (recorded as incomplete)."""

    def __init__(self) -> None:
        self._batches: weakref.ref[Generator[Any, None, None]] | None = None

    def close(self) -> None:
        """Close the running epoch, if any is still alive. Not when the call comes from inside it
        (a run closing its loader after a worker died, a signal handler run during its wait for a
        batch): a generator cannot close itself; it ends by its own error, or finds its batches cut
        short and records the epoch incomplete."""
        batches = self._batches() if self._batches is not None else None
        if batches is not None and inspect.getgeneratorstate(batches) != inspect.GEN_RUNNING:
            batches.close()

    def hold(self, batches: Generator[Any, None, None]) -> None:
        """``batches`` is the running epoch now."""
        self._batches = weakref.ref(batches)


class RunBase:
    """What the runs of both loaders share: one epoch, asked for when iterated (or measured); an
    unfinished previous epoch of the same loader is closed first (:class:`RunningEpoch`); a loaded
    state (:mod:`.resume`) skips the batches it consumed. Subclasses make the batches (``_batches``)."""

    def __init__(self, loader: RunLoader, epoch: int, *, jump: bool = False, resume: ResumeTracker,
                 running: RunningEpoch) -> None:
        self.loader = loader
        self.epoch = epoch
        self.jump = jump
        self.resume = resume
        self.running = running
        self.stats: EpochStats | None = None
        self.dataset: EpochDataset | None = None
        self.start_batch = 0
        """Batches skipped at the start because a loaded state had consumed them (0 otherwise)."""
        self._planned: tuple[Any, ...] | None = None
        self._length: int | None = None

    def __len__(self) -> int:
        """The batches of this epoch for this rank (the same on every rank unless ``balance="none"``),
        including any a resume skips, as ``len(StatefulDataLoader)``. Before iteration this looks the
        epoch up (cutting it on the mount) and plans it, collectively when torch.distributed is
        initialised; the iteration then uses that plan. Known once planned, it is not asked again.

        Planning also sets ``start_batch`` to what a loaded state will skip, for the docs' progress
        bar, ``tqdm(run, total=len(run), initial=run.start_batch)``, which reads it before the loop."""
        if self._length is None:
            self._planned = self._plan()
        assert self._length is not None
        return self._length

    def _plan(self) -> tuple[Any, ...]:
        """Look the epoch up, and tell ``start_batch`` what a loaded state will skip of it (the
        iteration's start decides, collectively: see :meth:`_begin`)."""
        planned = self._lookup()
        self._length = len(planned[1])
        self.start_batch = self.resume.preview(self.epoch, planned[0], len(planned[1]))
        return planned

    def _lookup(self) -> tuple[Any, ...]:
        """``loader.plan(epoch)``; a resumed epoch is allowed to be cut out of order (``jump``), and
        one not on the node any more is an :class:`~.resume.EpochResumeError` saying so."""
        pending = self.resume.pending(self.epoch)
        try:
            planned: tuple[Any, ...] = self.loader.plan(self.epoch, jump=self.jump or pending is not None)
        except (FileNotFoundError, TimeoutError) as exc:
            gone = self.resume.gone(self.epoch, exc)
            if gone is None:
                raise
            raise gone from exc
        return planned

    def _begin(self) -> tuple[Any, ...]:
        """The plan (made by ``len()`` or now) and the position: the batches already consumed skipped."""
        planned = self._planned if self._planned is not None else self._lookup()
        self._planned = None  # a second iteration looks the epoch up again
        dataset, batches = planned[0], planned[1]
        self._length = len(batches)
        # Batch counts kept equal across the world make every rank's start collective already; the
        # resume decision is then the world's too (one rank resuming while another starts over
        # would leave them out of step in every collective after). Without a world of several ranks
        # agree_resume answers for this rank alone, with no collective. Decided here, not by len():
        # a state may be loaded in between (Lightning asks len() first), and every rank starts.
        collective = self.loader.balance != "none"
        self.start_batch = self.resume.start(self.epoch, dataset, len(batches),
                                             agree_resume if collective else None)
        return planned

    def _measure(self, dataset: EpochDataset, padded: int) -> EpochStats:
        """The stats of this epoch of ``dataset`` (read from now on), kept on the run as it runs."""
        self.dataset = dataset
        self.stats = EpochStats(epoch=self.epoch, files=len(dataset), excluded=dataset.excluded,
                                cut_wait_seconds=dataset.wait_seconds, padded=padded)
        return self.stats

    def __iter__(self) -> Iterator[Any]:
        """Start the epoch: the lookup of ``epoch-N`` happens now (unless ``len()`` made it)."""
        self.running.close()
        batches = self._batches()
        self.running.hold(batches)
        return batches

    def _batches(self) -> Generator[Any, None, None]:
        raise NotImplementedError

    def _yielded(self, stats: EpochStats, started: float, samples: int, nbytes: int, waited: float) -> None:
        """Count a batch about to be yielded: in the stats, the report and the resume position."""
        stats.wait_seconds += waited
        self.loader.reporter.add(samples=samples, nbytes=nbytes, wait_seconds=waited)
        stats.batches += 1
        stats.samples += samples
        stats.bytes += nbytes
        stats.seconds = time.monotonic() - started
        self.resume.advance(samples)

    def _end(self, dataset: EpochDataset, stats: EpochStats, started: float) -> None:
        """The epoch is done with (finished, broken out of or failed): let the sidecar retire it after
        its window, say so in the report, and record the stats."""
        dataset.release()
        self.loader.reporter.done(self.epoch)
        stats.seconds = time.monotonic() - started
        self.loader.history.append(stats)
        if self.loader.on_epoch_end is not None:
            self.loader.on_epoch_end(stats)


class EpochRun(RunBase):
    """The batches of one epoch of an :class:`~.loader.EpochLoader`; iterate it once (a second
    iteration reads the same epoch again)."""

    def __init__(self, loader: RunLoader, epoch: int, *, jump: bool = False, resume: ResumeTracker,
                 running: RunningEpoch, workers: Workers) -> None:
        super().__init__(loader, epoch, jump=jump, resume=resume, running=running)
        self.workers = workers

    def _batches(self) -> Generator[Any, None, None]:
        loader = self.loader
        started = time.monotonic()
        dataset, batches, sizes, padded = self._begin()
        skip = self.start_batch
        batches, sizes = batches[skip:], sizes[skip:]
        stats = self._measure(dataset, padded)
        dataloader = self.workers.serve(batches)
        loader.reporter.reading(self.epoch)  # named in reports: the folder view's sign of a reader
        try:
            waiting = time.monotonic()
            iterator = iter(dataloader)
            for number, batch in enumerate(iterator):
                if not self.workers.serving(dataloader):
                    # Closed under the run (the loader closed by a signal handler while the run
                    # waited): torch's stopped iterator skips the batches of the stopped workers and
                    # hands out ones received early, out of turn. None of those is this epoch's next.
                    break
                dataset.renew_hold()  # after a FUSE server restart, hold the epoch on the new mount
                self._yielded(stats, started, len(batches[number]), sizes[number], time.monotonic() - waiting)
                yield batch
                waiting = time.monotonic()
            stats.wait_seconds += time.monotonic() - waiting
            # Only a whole epoch is complete: torch's iterator also ends, silently, when its workers
            # were shut down under it.
            stats.complete = stats.batches == len(batches)
            if stats.complete:
                self.resume.done()
        except Exception as exc:
            # A sample's error leaves the workers serving; a dead worker (killed, out of memory) breaks
            # the DataLoader for good, so drop it: the next epoch starts fresh workers.
            failure = self.workers.failure(exc)
            if failure is None:
                raise
            loader.close()
            if failure is exc:
                raise
            raise failure from exc
        finally:
            self._end(dataset, stats, started)


class ArrayEpochRun(RunBase):
    """The batches of one epoch of an :class:`~.arrayloader.ArrayLoader`; iterating again reads the
    epoch again (the ring serves one epoch at a time: see :class:`RunBase`)."""

    def __init__(self, loader: RunLoader, epoch: int, *, jump: bool = False, resume: ResumeTracker,
                 running: RunningEpoch, start_reads: StartReads) -> None:
        super().__init__(loader, epoch, jump=jump, resume=resume, running=running)
        self.start_reads = start_reads

    def _batches(self) -> Generator[Any, None, None]:
        loader = self.loader
        started = time.monotonic()
        dataset, batches, padded = self._begin()
        batches = batches[self.start_batch:]
        stats = self._measure(dataset, padded)
        reads: Reads | None = None
        loader.reporter.reading(self.epoch)  # named in reports: the folder view's sign of a reader
        try:
            if batches:
                reads = self.start_reads(dataset, batches)
            for indices in batches:
                waiting = time.monotonic()
                assert reads is not None
                batch = reads.next()
                dataset.renew_hold()  # after a FUSE server restart, hold the epoch on the new mount
                waited = time.monotonic() - waiting
                self._yielded(stats, started, len(indices), sum(dataset.sizes[i] for i in indices), waited)
                yield batch
            stats.complete = True
            self.resume.done()
        finally:
            if reads is not None:
                reads.close()
            self._end(dataset, stats, started)
