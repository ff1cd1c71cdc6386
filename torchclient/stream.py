"""``EpochStream``: one iterable that is a fresh epoch each time it is iterated, for training frameworks.

Why: frameworks such as Lightning take one "dataloader" and iterate it once per training epoch
(``iter()`` again at each epoch start), asking ``len()`` for the progress bar, the schedulers and
the end of the epoch, and, for a mid-epoch resume, ``state_dict()``/``load_state_dict()`` on it.
Our loaders instead hand out one run per epoch (``loader.epoch(n)``), because epoch n+1 is a
different, larger file list cut at the boundary. The stream bridges the two: each iteration is
``loader.epoch(n)`` with ``n`` from ``epoch_fn`` (the framework's epoch counter, such as
``trainer.current_epoch``) or, without one, the loader's ``next_epoch``; ``len()`` is that run's;
the state methods are the loader's. Imports nothing of any framework.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .run import RunBase


class StreamLoader(Protocol):
    """What a stream uses of its loader (both loaders have it): their public epoch and state methods."""

    @property
    def next_epoch(self) -> int:
        """The epoch to iterate next (:mod:`.resume`)."""
        ...

    def epoch(self, epoch: int, *, jump: bool = False) -> RunBase:
        """The run of ``epoch``."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """The loader's position."""
        ...

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Continue from a position."""
        ...


class EpochStream:
    """Iterate ``loader.epoch(epoch_fn())`` each time it is iterated (``loader.next_epoch`` without
    ``epoch_fn``); ``len()`` is that epoch's batches for this rank (:meth:`RunBase.__len__`, which
    looks the epoch up then); ``state_dict``/``load_state_dict`` are the loader's."""

    def __init__(self, loader: StreamLoader, epoch_fn: Callable[[], int | None] | None = None, *,
                 jump: bool = False) -> None:
        self.loader = loader
        self.epoch_fn = epoch_fn
        self.jump = jump
        self._run: RunBase | None = None

    @property
    def epoch(self) -> int | None:
        """The epoch the next iteration reads; None when ``epoch_fn`` says training is over."""
        if self.epoch_fn is None:
            return int(self.loader.next_epoch)
        epoch = self.epoch_fn()
        return None if epoch is None else int(epoch)

    def run(self) -> RunBase | None:
        """The run of :attr:`epoch` (one per epoch, so ``len()`` and the iteration share its plan);
        once training is over (``epoch`` None), the last run, so that a framework's ``len()`` at
        its teardown never looks up an epoch nobody will read."""
        epoch = self.epoch
        if epoch is not None and (self._run is None or self._run.epoch != epoch):
            self._run = self.loader.epoch(epoch, jump=self.jump)
        return self._run

    def __len__(self) -> int:
        run = self.run()
        return 0 if run is None else len(run)

    def __iter__(self) -> Iterator[Any]:
        if self.epoch is None:
            return iter(())
        run = self.run()
        assert run is not None  # an epoch to read has its run
        return iter(run)  # a second iter() before any batch (Lightning's) reuses the plan

    def state_dict(self) -> dict[str, Any]:
        return dict(self.loader.state_dict())

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        self.loader.load_state_dict(state_dict)
