"""Resuming a loader mid-epoch: ``state_dict()`` / ``load_state_dict()`` for both loaders.

Why it can be exact: an epoch folder is immutable while it is on the node, and the batches a rank
gets are a pure function of its file list and the loader's settings (:mod:`.epochplan`). So the
position in an epoch is just (epoch, batches already yielded); a restarted job that looks up the
same epoch, finds the same file list and skips those batches gets exactly the remaining samples.

What the state holds (plain Python values, for ``torch.save`` or JSON): the epoch and the batches
and samples yielded of it to this rank, the epoch's batch count for this rank, the epoch's identity
(its number of files and a digest of its file list, paths and sizes), and the settings the plan
depends on (seed, shuffle, batch size, drop_last, world size, rank, partition, balance). Names
follow ``torchdata``'s ``StatefulDataLoader``: ``state_dict()`` after a batch says that batch is
consumed; ``load_state_dict()`` on a fresh loader makes its next iteration of that epoch start after it.

When the epoch is **not** on the node any more, or is another epoch under the same number (a
drained node, a cold cache whose sidecar cut its own epoch N, an epoch retired while the job was
down), the remaining samples cannot be produced. By default the iteration then raises
:class:`EpochResumeError` naming the epoch, the position and what was found, before any batch, so
nothing trains on other data by surprise; ``on_resume_mismatch="restart"`` instead trains on epoch N
as the node has it now, from its first batch (one WARNING line). docs/torchclient.md, "Resuming".

Who holds what: each loader composes one :class:`ResumeTracker` (the position) and hands it to each
of its epoch runs (:mod:`.run`), which ask it where to start and tell it each batch yielded; the
loader's public ``state_dict``/``load_state_dict``/``next_epoch`` (:class:`Resumable`) read and set
the same tracker. So the runs never touch the loader's private state, nor the loader the run's.
"""

from __future__ import annotations

import hashlib
import logging
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from .dataset import EpochDataset
    from .epochplan import Balance, Partition
    from .world import World

log = logging.getLogger("epochfs.torchclient")

STATE_VERSION = 1
OnResumeMismatch = Literal["raise", "restart"]
SETTINGS = ("batch_size", "seed", "shuffle", "drop_last", "num_replicas", "partition", "balance")
"""The settings the batches depend on, besides the rank: a state made with others cannot resume."""



def _count(state: Mapping[str, Any], name: str) -> int:
    """A whole number of at least 0 from a loaded state, else ValueError naming it: a hand-edited or
    damaged checkpoint's -3 became the next epoch, its "x" failed as int()'s bare message."""
    value: Any = state.get(name)
    try:
        count = operator.index(value)  # an int, or numpy's (a state that went through arrays)
    except TypeError:
        count = -1
    if isinstance(value, bool) or count < 0:
        raise ValueError(f"the loader state's {name} must be a whole number >= 0, got {value!r}")
    return count

class EpochResumeError(RuntimeError):
    """The epoch a loader state points into is gone from the node or is not the same epoch any more.

    ``.epoch`` is its number, ``.position`` the batches already consumed of it; the message says
    what was found and the choices."""

    def __init__(self, message: str, epoch: int, position: int) -> None:
        super().__init__(message)
        self.epoch = epoch
        self.position = position


def epoch_digest(files: Sequence[str], sizes: Sequence[int]) -> str:
    """``sha256:<hex>`` of an epoch's file list (paths and sizes, in order): its identity on a node.

    The text is hashed as UTF-8 with ``surrogatepass``: a file name that is not UTF-8 (a walked
    Samba or old NFS share) comes as lone surrogates (Python's ``surrogateescape``), which a strict
    encode refuses, so such a folder could never be checkpointed. UTF-8 names hash as before."""
    digest = hashlib.sha256()
    text = "\n".join(f"{path}\t{size}" for path, size in zip(files, sizes, strict=True))
    digest.update(text.encode("utf-8", "surrogatepass"))
    return "sha256:" + digest.hexdigest()


@dataclass
class Position:
    """Where a loader is: ``batches`` of the ``total`` batches of ``epoch`` consumed by this rank."""

    epoch: int
    batches: int = 0
    samples: int = 0
    total: int | None = None
    files: int | None = None
    digest: str | None = None
    complete: bool = False
    world_size: int | None = None


@dataclass(frozen=True)
class Identity:
    """Whose position a state is: ``rank`` in the loader's split (a node's ranks with
    ``partition="node"``), the job-wide ``global_rank``, and the job's ``world_size``."""

    rank: int
    global_rank: int
    world_size: int


Agree = Callable[[int, bool], tuple[int, int, list[int]]]
"""(batches to skip, epoch changed) -> (fewest skipped on any rank, most, other ranks changed):
:func:`~.peers.agree_resume`, so that every rank resumes or starts over alike."""


class ResumeTracker:
    """The position of one loader: its running (or last) epoch's, updated as batches are yielded,
    and a loaded position not applied yet (``pending``), which the next iteration of its epoch uses.

    One per loader, given to each of its runs; the settings the batches depend on are the loader's
    and are passed in when a state is made or loaded, so the tracker never reads its owner."""

    def __init__(self, on_resume_mismatch: str) -> None:
        if on_resume_mismatch not in ("raise", "restart"):
            raise ValueError(f"on_resume_mismatch must be 'raise' or 'restart', got {on_resume_mismatch!r}")
        self.on_resume_mismatch: OnResumeMismatch = on_resume_mismatch  # type: ignore[assignment]
        self._position: Position | None = None
        self._pending: Position | None = None
        self._digest_of: EpochDataset | None = None  # what the position's digest is computed from, lazily
        self._checked: tuple[EpochDataset, str] | None = None  # the last digest a check computed, and of what
        self.world_size: int | None = None  # the job's, told by load_state_dict: a pending position's check

    # ------------------------------------------------------------------ the loader's public side
    def state_dict(self, loader: str, identity: Identity, settings: Mapping[str, Any]) -> dict[str, Any]:
        """The state of :meth:`Resumable.state_dict`: ``loader`` is the loader's class name."""
        position = self._pending or self._position
        state: dict[str, Any] = {"version": STATE_VERSION, "loader": loader}
        if position is not None and position is self._position and self._digest_of is not None:
            dataset, self._digest_of = self._digest_of, None
            position.digest = epoch_digest(dataset.files, dataset.sizes)
        fields = asdict(position) if position is not None else asdict(Position(epoch=-1))
        state.update(epoch=None if position is None else fields["epoch"],
                     batches_yielded=fields["batches"], samples_yielded=fields["samples"],
                     batches=fields["total"], complete=fields["complete"], files=fields["files"],
                     digest=fields["digest"], rank=identity.rank, global_rank=identity.global_rank,
                     world_size=identity.world_size)
        state.update({name: settings[name] for name in SETTINGS})
        return state

    def load_state_dict(self, state_dict: Mapping[str, Any], identity: Identity,
                        settings: Mapping[str, Any]) -> None:
        """:meth:`Resumable.load_state_dict` against this loader's ``identity`` and ``settings``."""
        state = dict(state_dict)
        self.world_size = identity.world_size
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"loader state version {state.get('version')!r} is not {STATE_VERSION} "
                             "(made by another epochfs?)")
        differ = [f"{name}={state.get(name)!r} (this loader: {settings[name]!r})"
                  for name in SETTINGS if state.get(name) != settings[name]]
        if differ:
            raise ValueError("the loader state was made with other settings, so its remaining batches "
                             f"would not be these: {', '.join(differ)}")
        # A rank's own state is keyed by its global rank: rank (its place in the split) is the same
        # on every node with partition="node", and another node's epoch holds other files.
        own = state.get("rank") == identity.rank and state.get("global_rank") == identity.global_rank
        if not own and settings["balance"] == "none":
            mine = (f"rank {identity.rank}" if state.get("rank") != identity.rank
                    else f"global rank {identity.global_rank}")
            theirs = (f"rank {state.get('rank')}" if state.get("rank") != identity.rank
                      else f"global rank {state.get('global_rank')}")
            raise ValueError(f"the loader state is {theirs}'s and this is {mine}: "
                             "with balance='none' ranks' batch counts differ, so load each rank's own state")
        if state.get("epoch") is None:
            self._position = self._pending = None
            return
        position = Position(epoch=_count(state, "epoch"), batches=_count(state, "batches_yielded"),
                            samples=_count(state, "samples_yielded"), total=state.get("batches"),
                            files=state.get("files"), digest=state.get("digest"),
                            complete=bool(state.get("complete")), world_size=state.get("world_size"))
        if not own:
            position.files = position.digest = None  # another rank's node may hold other files
        self._digest_of = None
        # Every batch yielded is the end of the epoch, whether or not the state says complete (one
        # saved after the last step by an older epochfs did not): it resumes nothing.
        position.complete = position.complete or (position.total is not None
                                                  and position.batches >= position.total)
        if position.complete or position.batches == 0:
            self._position, self._pending = position, None  # nothing to skip: the next epoch starts fresh
        else:
            self._position, self._pending = None, position

    @property
    def next_epoch(self) -> int:
        """:attr:`Resumable.next_epoch`."""
        position = self._pending or self._position
        if position is None:
            return 0
        return position.epoch + 1 if position.complete else position.epoch

    # ------------------------------------------------------------------ the runs' side
    def pending(self, epoch: int) -> Position | None:
        """The loaded position if it is ``epoch``'s; a pending one of another epoch is dropped."""
        pending = self._pending
        if pending is not None and pending.epoch != epoch:
            log.warning("epochfs: the loaded state points into epoch %d (batch %d of %s), but epoch %d "
                        "is iterated: the state is not used",
                        pending.epoch, pending.batches, pending.total, epoch)
            self._pending = pending = None
        return pending

    def gone(self, epoch: int, exc: BaseException) -> EpochResumeError | None:
        """The error for a pending position whose epoch the lookup did not find (``exc``); None
        when nothing is pending or ``on_resume_mismatch="restart"`` (the lookup's error stands)."""
        pending = self._pending
        if pending is None or self.on_resume_mismatch == "restart":
            return None
        return EpochResumeError(
            f"cannot resume epoch {epoch} at batch {pending.batches} of {pending.total}: the epoch is not on "
            f"this node any more ({exc}). Its remaining samples are gone with it (a drained node, a cold "
            f"cache, an epoch retired while the job was down). Choices: on_resume_mismatch='restart' trains "
            f"on epoch {epoch} as the sidecar cuts it now, from its first batch; or iterate a newer epoch "
            f"(the loaded state is then not used)", epoch, pending.batches)

    def preview(self, epoch: int, dataset: EpochDataset, total: int) -> int:
        """The batches the iteration of ``epoch`` (planned: ``total`` batches of ``dataset``) will
        skip, as far as this rank can tell before it begins: what ``len(run)`` tells ``start_batch``,
        for a progress bar made before the loop. Changes nothing, raises nothing and asks no other
        rank; :meth:`start` decides, when the iteration begins (a mismatch there, or the world's
        verdict, may make it 0)."""
        pending = self._pending
        if pending is None or pending.epoch != epoch or self._differences(pending, dataset, total):
            return 0
        return min(pending.batches, total)

    def start(self, epoch: int, dataset: EpochDataset, total: int, agree: Agree | None = None) -> int:
        """Begin ``epoch`` (planned: ``total`` batches of ``dataset``): the batches to skip.

        Checks a pending position against the epoch found; on a mismatch raises EpochResumeError,
        or with ``on_resume_mismatch="restart"`` logs one line and starts from the first batch.
        With ``agree`` (the ranks' batch counts are kept equal), the decision is the world's: one
        rank's mismatch, or ranks that would skip different numbers of batches (a rank without a
        state, a world of another size), make every rank raise or start over, never some resume
        while others do not (which would leave them out of step in every collective after)."""
        pending = self.pending(epoch)
        self._pending = None
        self._position = Position(epoch=epoch, total=total, files=len(dataset))
        self._digest_of = dataset
        found = self._differences(pending, dataset, total) if pending is not None else []
        checked, self._checked = self._checked, None
        if checked is not None and checked[0] is dataset:
            self._digest_of, self._position.digest = None, checked[1]
        skip = min(pending.batches, total) if pending is not None and not found else 0
        what = (f"epoch {epoch} on this node is not the one the state was saved in: it has "
                f"{'; '.join(found)}") if found else ""
        if agree is not None:
            fewest, most, changed = agree(skip, bool(found))
            if not found and changed:
                ranks = ", ".join(map(str, changed))
                what = (f"epoch {epoch} on rank {ranks}'s node is not the one its state was saved in, "
                        "and the ranks decide alike")
            elif not found and fewest != most:
                what = (f"ranks would resume epoch {epoch} at different batches ({fewest} to {most}: a rank "
                        "without a state, or states of different steps), and the ranks decide alike")
        if pending is None and not what:
            return 0
        batches = pending.batches if pending is not None else 0
        if what:
            if self.on_resume_mismatch == "raise":
                raise EpochResumeError(
                    f"cannot resume epoch {epoch} at batch {batches} of "
                    f"{pending.total if pending is not None else total}: {what} "
                    "(a drained node or a cold cache: the sidecar cut a new epoch under this number). "
                    f"Choices: on_resume_mismatch='restart' trains on epoch {epoch} as it is now, from its "
                    "first batch; or iterate a newer epoch (the loaded state is then not used)",
                    epoch, batches)
            log.warning("epochfs: %s; on_resume_mismatch='restart': training on it from its first batch "
                        "instead of resuming at batch %d", what, batches)
            return 0
        assert pending is not None
        self._position.batches, self._position.samples = skip, pending.samples
        return skip

    def _differences(self, pending: Position, dataset: EpochDataset, total: int) -> list[str]:
        """How ``epoch`` as planned now differs from the position's (empty: the same epoch)."""
        found = [f"{total} batches for this rank, not {pending.total}"] if pending.total != total else []
        if pending.files is not None and pending.files != len(dataset):
            found.append(f"{len(dataset)} files, not {pending.files}")
        if None not in (pending.world_size, self.world_size) and pending.world_size != self.world_size:
            found.append(f"a job of {self.world_size} ranks, not {pending.world_size}")
        if not found and pending.digest is not None:
            checked = self._checked
            digest = (checked[1] if checked is not None and checked[0] is dataset
                      else epoch_digest(dataset.files, dataset.sizes))
            self._checked = (dataset, digest)  # a preview's digest serves the start's check and state
            if digest != pending.digest:
                found.append("another file list (the same count, other paths or sizes)")
        return found

    def advance(self, samples: int) -> None:
        """A batch of ``samples`` was yielded (it counts as consumed from now on). The last one
        completes the epoch at once: a state saved after its step (as the docs' loop does) resumes
        at the next epoch, not in this one, which may be retired by then."""
        position = self._position
        if position is not None:
            position.batches += 1
            position.samples += samples
            if position.total is not None and position.batches >= position.total:
                position.complete = True

    def done(self) -> None:
        """The epoch's last batch was yielded: the next state points to the epoch after it."""
        if self._position is not None:
            self._position.complete = True


class Resumable:
    """The state methods of :class:`~.loader.EpochLoader` and :class:`~.arrayloader.ArrayLoader`,
    over the loader's :class:`ResumeTracker` (made by ``_init_resume``, handed to its runs)."""

    batch_size: int
    seed: int
    shuffle: bool
    drop_last: bool
    num_replicas: int
    rank: int
    partition: Partition
    balance: Balance
    world: World
    _resume: ResumeTracker

    def _init_resume(self, on_resume_mismatch: str) -> None:
        self._resume = ResumeTracker(on_resume_mismatch)

    def _identity(self) -> Identity:
        """Whose position this loader's state is: its split rank, global rank and the job's size."""
        return Identity(rank=self.rank, global_rank=self.world.rank, world_size=self.world.size)

    def _settings(self) -> dict[str, Any]:
        """The settings the batches depend on (:data:`SETTINGS`), as they are now."""
        return {name: getattr(self, name) for name in SETTINGS}

    @property
    def on_resume_mismatch(self) -> OnResumeMismatch:
        """What a resume does when its epoch is gone or differs: "raise" or "restart"."""
        return self._resume.on_resume_mismatch

    @on_resume_mismatch.setter
    def on_resume_mismatch(self, value: OnResumeMismatch) -> None:
        self._resume.on_resume_mismatch = value

    def state_dict(self) -> dict[str, Any]:
        """The position (epoch, batches and samples consumed by this rank), the epoch's identity and
        the settings, as plain values. Cheap after the first call of an epoch (the digest is kept)."""
        return self._resume.state_dict(type(self).__name__, self._identity(), self._settings())

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Continue from ``state_dict``: the next iteration of its epoch skips the batches it consumed.

        Settings that change the batches (batch size, seed, shuffle, drop_last, world size,
        partition, balance) must be the loader's: otherwise ValueError naming them. A state from
        another rank is accepted when the batch counts are equal across ranks (``balance`` "pad" or
        "truncate"): the position is then the same on every rank, as in a checkpoint written by rank
        0 only (Lightning's); only the batch count, not the file list, can be checked then."""
        self._resume.load_state_dict(state_dict, self._identity(), self._settings())

    @property
    def next_epoch(self) -> int:
        """The epoch a training loop should iterate next: the loaded or running epoch while it is
        unfinished, the one after it once it completed; 0 before any."""
        return self._resume.next_epoch
