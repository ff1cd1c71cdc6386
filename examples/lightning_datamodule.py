"""A LightningDataModule over an epochfs mount: a fresh, larger epoch each training epoch, resumable.

    python examples/lightning_datamodule.py                      # a generated plain folder, CPU, seconds
    python examples/lightning_datamodule.py --root /mnt/epochfs  # a real mount (float32 .npy samples)

Each Lightning epoch e reads ``epoch-e`` of the mount, cut at that boundary with everything the
sidecar fetched meanwhile: ``train_dataloader()`` returns an ``EpochStream`` (epoch number from
``trainer.current_epoch``) and ``reload_dataloaders_every_n_epochs=1`` makes Lightning ask for its
``len()`` again each epoch (the epochs grow). The stream has ``state_dict``/``load_state_dict``, so
Lightning stores the loader's position in a mid-epoch checkpoint and a resumed fit continues with
exactly the remaining samples of that epoch (docs/torchclient.md, "Lightning").

Lightning is an optional import: ``EpochDataModule`` is built on first use of
:func:`datamodule_class`, so this file imports without it (``pip install lightning``). Lightning
imports torchvision where it is installed; :func:`import_lightning` copes with a torchvision built
for another torch (the repo's dev venv: a CUDA torchvision beside the CPU torch).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

import numpy as np
import torch

from epochfs.torchclient import ArrayLoader, EpochStream
from epochfs.torchclient.plainfolder import publish_epoch


def import_lightning() -> Any:
    """``lightning``, imported where the installed torchvision does not match torch.

    Why: ``import lightning`` imports torchvision when it is installed, and a torchvision wheel built
    for another torch (PyPI's CUDA build beside a CPU torch, as in this repo's ``make venv``) fails at
    import with ``RuntimeError: operator torchvision::nms does not exist``, in the one module that
    registers its C operators' fake kernels. Lightning needs none of them here, so that module is
    replaced by an empty one and torchvision's Python parts load; any other error is raised. With
    a torchvision that matches torch (or none) this is a plain ``import lightning``.
    """
    try:
        importlib.import_module("torchvision")
    except ModuleNotFoundError:
        pass  # no torchvision: lightning does without it
    except RuntimeError as exc:
        if "torchvision::" not in str(exc):
            raise
        meta = "torchvision._meta_registrations"
        sys.modules.setdefault(meta, types.ModuleType(meta))
        importlib.import_module("torchvision")
    return importlib.import_module("lightning")


def make_loader(root: str | os.PathLike[str], batch_size: int, **options: Any) -> ArrayLoader:
    """The loader the data module uses. ``copy=True``: Lightning may hold a batch while it asks for the
    next (its prefetching fetcher), so each batch gets memory of its own rather than a ring buffer."""
    return ArrayLoader(root, batch_size=batch_size, copy=True, **options)


def datamodule_class() -> type:
    """``EpochDataModule``, a ``lightning.LightningDataModule`` (imports lightning now)."""
    L = import_lightning()

    class EpochDataModule(L.LightningDataModule):  # type: ignore[name-defined]
        """Training batches of epoch ``trainer.current_epoch`` of the mount at ``root``."""

        def __init__(self, root: str | os.PathLike[str], batch_size: int, **loader_options: Any) -> None:
            super().__init__()
            self.root, self.batch_size, self.loader_options = root, batch_size, loader_options
            self.loader: ArrayLoader | None = None

        def setup(self, stage: str) -> None:
            if self.loader is None:  # one loader (threads, ring) for the whole fit
                self.loader = make_loader(self.root, self.batch_size, **self.loader_options)

        def train_dataloader(self) -> EpochStream:
            assert self.loader is not None
            return EpochStream(self.loader, self._epoch)

        def _epoch(self) -> int | None:
            """Lightning's epoch; None once the fit is done (Lightning asks len() at its teardown,
            with current_epoch one past the last: that epoch must not be looked up, or cut)."""
            return None if self.trainer.fit_loop.done else self.trainer.current_epoch

        def teardown(self, stage: str) -> None:
            if self.loader is not None:
                self.loader.close()
                self.loader = None

    return EpochDataModule


def module_class() -> type:
    """A small regression model: predicts each sample's mean from the sample."""
    L = import_lightning()

    class MeanModel(L.LightningModule):  # type: ignore[name-defined]
        def __init__(self, features: int) -> None:
            super().__init__()
            self.net = torch.nn.Linear(features, 1)
            self.seen: list[tuple[int, list[float]]] = []  # (epoch, first value of each sample)

        def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
            x = batch.view(batch.shape[0], -1)
            self.seen.append((self.current_epoch, x[:, 0].tolist()))
            loss = torch.nn.functional.mse_loss(self.net(x).squeeze(1), x.mean(dim=1))
            self.log("loss", loss, prog_bar=True)
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.05)

    return MeanModel


def generate(base: Path, samples: int, epochs: int, features: int) -> Path:
    """A plain folder shaped like the mount: epoch e holds the first (e+1)/epochs of the samples."""
    objects, root = base / "objects", base / "mnt"
    objects.mkdir(parents=True)
    root.mkdir()
    rng = np.random.default_rng(0)
    for i in range(samples):
        np.save(objects / f"s{i:05d}.npy", rng.standard_normal(features, dtype=np.float32))
    names = sorted(os.listdir(objects))
    for epoch in range(epochs):
        publish_epoch(root, epoch, {n: objects / n for n in names[:samples * (epoch + 1) // epochs]})
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", help="an epochfs mount (default: a generated plain folder)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()
    L = import_lightning()

    features = 64
    with tempfile.TemporaryDirectory(prefix="epochfs-lightning-") as tmp:
        root = args.root or generate(Path(tmp), 256, args.epochs, features)
        data = datamodule_class()(root, args.batch_size, report=args.root is not None)
        model = module_class()(features)
        trainer = L.Trainer(max_epochs=args.epochs, reload_dataloaders_every_n_epochs=1, accelerator="auto",
                            logger=False, enable_checkpointing=False, enable_progress_bar=False,
                            enable_model_summary=False)
        trainer.fit(model, datamodule=data)
        for epoch in range(args.epochs):
            seen = sum(len(values) for e, values in model.seen if e == epoch)
            print(f"lightning epoch {epoch}: {seen} samples from epoch-{epoch}")


if __name__ == "__main__":
    main()
